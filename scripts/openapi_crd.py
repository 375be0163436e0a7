"""A CustomResourceDefinition whose schema is an upstream OpenAPI (swagger 2.0) definition, resolved mechanically.

Used for KubeVirt's ``KubeVirt`` CRD in the live tests: KubeVirt's operator builds its CRDs in Go
(``kubevirt.io/kubevirt/pkg/virt-operator/resource/generate/components``), but that package cannot be built from
the Go module proxy (it imports ``kubevirt.io/virt-template-client-go v0.2.0``, which the proxy refuses with 403).
The operator's schemas are generated from the same Go types as KubeVirt's published ``api/openapi-spec/swagger.json``
(``../shared/reference/kubevirt-openapi-swagger.json``), so the schema here is that definition with every
``$ref`` inlined and the apimachinery types written the way a structural CRD schema needs them. Nothing in it is
written by hand.
"""

from __future__ import annotations

from typing import Any

# apimachinery types whose OpenAPI form a CRD schema cannot take as is (the way controller-gen writes them).
SPECIAL = {
    "k8s.io.apimachinery.pkg.api.resource.Quantity": {
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "x-kubernetes-int-or-string": True,
    },
    "k8s.io.apimachinery.pkg.util.intstr.IntOrString": {
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "x-kubernetes-int-or-string": True,
    },
    "k8s.io.apimachinery.pkg.apis.meta.v1.Time": {"type": "string", "format": "date-time"},
    "k8s.io.apimachinery.pkg.apis.meta.v1.Duration": {"type": "string"},
    "k8s.io.apimachinery.pkg.apis.meta.v1.FieldsV1": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    "k8s.io.apimachinery.pkg.apis.meta.v1.ObjectMeta": {"type": "object"},
}
KEPT = {"type", "format", "enum", "required", "items", "properties", "additionalProperties", "description", "nullable"}


def resolve(schema: Any, definitions: dict[str, Any], seen: tuple[str, ...] = ()) -> dict[str, Any]:
    """``schema`` with every ``$ref`` inlined; a recursive reference keeps its fields unchecked."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        if name in SPECIAL:
            return dict(SPECIAL[name])
        if name in seen:
            return {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        return resolve(definitions[name], definitions, (*seen, name))
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key not in KEPT:
            continue
        if key == "properties":
            out[key] = {name: resolve(sub, definitions, seen) for name, sub in value.items()}
        elif key in {"items", "additionalProperties"} and isinstance(value, dict):
            out[key] = resolve(value, definitions, seen)
        elif key == "type":
            out.update(structural_type(value))
        else:
            out[key] = value
    if "type" not in out and not out.get("x-kubernetes-int-or-string"):
        return {"type": "object", "x-kubernetes-preserve-unknown-fields": True, **out}
    if out.get("type") == "object" and "properties" not in out and "additionalProperties" not in out:
        out["x-kubernetes-preserve-unknown-fields"] = True
    return out


def structural_type(value: str | list[str]) -> dict[str, Any]:
    """A CRD schema's one ``type`` for an OpenAPI ``type``, which may be a list (KubeVirt's swagger writes a nullable
    ``metav1.Time`` as ``["string", "null"]``; a CRD takes one type, with ``nullable``)."""
    if isinstance(value, str):
        return {"type": value}
    kinds = sorted(kind for kind in value if kind != "null")
    nullable = {"nullable": True} if "null" in value else {}
    if len(kinds) == 1:
        return {"type": kinds[0], **nullable}
    if kinds == ["integer", "string"]:
        return {**SPECIAL["k8s.io.apimachinery.pkg.util.intstr.IntOrString"], **nullable}
    raise ValueError(f"no structural CRD schema has the OpenAPI type {value!r}")


def crd(
    swagger: dict, definition: str, group: str, version: str, kind: str, plural: str, namespaced: bool = True
) -> dict:
    schema = resolve({"$ref": f"#/definitions/{definition}"}, swagger["definitions"], ())
    schema["properties"]["metadata"] = {"type": "object"}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"},
            "scope": "Namespaced" if namespaced else "Cluster",
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                    "subresources": {"status": {}} if "status" in schema.get("properties", {}) else {},
                }
            ],
        },
    }
