"""scripts/openapi_crd.py: an upstream OpenAPI definition made into a structural CRD schema the API server takes."""

from __future__ import annotations

import json

import openapi_crd
import pytest


@pytest.mark.parametrize(
    ("openapi", "structural"),
    [
        ("string", {"type": "string"}),
        (["string", "null"], {"type": "string", "nullable": True}),
        (
            ["null", "integer", "string"],
            {**openapi_crd.SPECIAL["k8s.io.apimachinery.pkg.util.intstr.IntOrString"], "nullable": True},
        ),
    ],
)
def test_one_type_per_schema(openapi, structural):
    assert openapi_crd.structural_type(openapi) == structural


def test_a_type_no_crd_can_take_is_refused():
    with pytest.raises(ValueError, match="boolean"):
        openapi_crd.structural_type(["boolean", "string"])


def _types(schema: dict, path: str = ""):
    yield path, schema.get("type")
    for name, sub in (schema.get("properties") or {}).items():
        yield from _types(sub, f"{path}.{name}")
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            yield from _types(schema[key], f"{path}[{key}]")


def test_kubevirt_crd_has_one_type_per_schema(reference):
    swagger = json.loads((reference / "kubevirt-openapi-swagger.json").read_text())
    crd = openapi_crd.crd(swagger, "v1.KubeVirt", "kubevirt.io", "v1", "KubeVirt", "kubevirts")
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    wrong = [(path, kind) for path, kind in _types(schema) if kind is not None and not isinstance(kind, str)]
    assert not wrong, wrong[:5]
    # KubeVirt's swagger writes a condition's nullable time as ["string", "null"].
    condition = schema["properties"]["status"]["properties"]["conditions"]["items"]["properties"]
    assert condition["lastProbeTime"] == {"type": "string", "nullable": True}
