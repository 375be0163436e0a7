"""Schemas the cluster roles' objects are validated against, all of them real upstream schemas.

* core types (RuntimeClass, ConfigMap, Node): ``kubernetes-validate --strict`` (bundled Kubernetes OpenAPI);
* NodeFeatureRule and KataConfig: the CRDs in ../shared/reference/crds;
* KubeVirt: the KubeVirt OpenAPI (swagger) in ../shared/reference, ``v1.KubeVirt``.

Each validator also reports fields the API server would silently prune (a typo vanishes without error).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import socket
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

jsonschema = pytest.importorskip("jsonschema")
kubernetes_validate = pytest.importorskip("kubernetes_validate")

CORE_KINDS = {"RuntimeClass", "ConfigMap", "Node"}
REPO = Path(__file__).resolve().parents[2]
PLAYBOOK = REPO / "playbooks" / "cluster.yml"
QGS = "var/run/tdx-qgs/qgs.socket"


def pruned_fields(obj, schema, resolve, where="") -> list[str]:
    """Paths in ``obj`` the schema does not declare (``resolve`` follows ``$ref``)."""
    schema = resolve(schema)
    if schema.get("x-kubernetes-preserve-unknown-fields") or not isinstance(obj, dict | list):
        return []
    if isinstance(obj, list):
        items = schema.get("items", {})
        return [p for i, item in enumerate(obj) for p in pruned_fields(item, items, resolve, f"{where}[{i}]")]
    props = schema.get("properties")
    if props is None:
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            return [p for k, v in obj.items() for p in pruned_fields(v, extra, resolve, f"{where}.{k}")]
        return []
    out = []
    for key, value in obj.items():
        if key not in props:
            out.append(f"{where}.{key}")
        elif key != "metadata":
            out.extend(pruned_fields(value, props[key], resolve, f"{where}.{key}"))
    return out


def _crd_schema(path: Path, name: str) -> dict:
    for doc in yaml.safe_load_all(path.read_text()):
        if doc and doc["metadata"]["name"] == name:
            served = [v for v in doc["spec"]["versions"] if v.get("served")]
            return {
                "group": doc["spec"]["group"],
                "version": served[0]["name"],
                "schema": served[0]["schema"]["openAPIV3Schema"],
            }
    raise AssertionError(f"{name} not in {path}")


@pytest.fixture
def object_problems(reference) -> Callable[[dict], list[str]]:
    """``problems(obj)``: schema errors and pruned fields of one rendered object (empty when valid)."""
    return _validator(str(reference))


@functools.cache
def _validator(reference: str) -> Callable[[dict], list[str]]:
    ref = Path(reference)
    crds = {
        "NodeFeatureRule": _crd_schema(ref / "crds" / "nfd-api-crds.yaml", "nodefeaturerules.nfd.k8s-sigs.io"),
        "KataConfig": _crd_schema(ref / "crds" / "kataconfigs.yaml", "kataconfigs.kataconfiguration.openshift.io"),
    }
    swagger = json.loads((ref / "kubevirt-openapi-swagger.json").read_text())
    definitions = swagger["definitions"]

    def resolve(schema):
        while "$ref" in schema:
            schema = definitions[schema["$ref"].rsplit("/", 1)[1]]
        return schema

    def problems(obj: dict) -> list[str]:
        kind = obj["kind"]
        if kind in CORE_KINDS:
            try:
                kubernetes_validate.validate(obj, kubernetes_validate.latest_version(), strict=True)
            except kubernetes_validate.ValidationError as error:
                return [f"{kind}: {error.message} at {list(error.path)}"]
            return []
        if kind == "KubeVirt":
            schema = {"$ref": "#/definitions/v1.KubeVirt", "definitions": definitions}
            errors = [
                f"{'.'.join(map(str, e.path))}: {e.message}"
                for e in jsonschema.Draft4Validator(schema).iter_errors(obj)
            ]
            return errors + [f"pruned {p}" for p in pruned_fields(obj, schema, resolve)]
        if kind in crds:
            crd = crds[kind]
            schema = crd["schema"]
            errors = [
                f"{'.'.join(map(str, e.path))}: {e.message}"
                for e in jsonschema.Draft7Validator(schema).iter_errors(obj)
            ]
            return errors + [f"pruned {p}" for p in pruned_fields(obj, schema, lambda s: s)]
        raise AssertionError(f"no schema for {kind} in this test")

    problems.kubevirt_definitions = definitions  # type: ignore[attr-defined]
    problems.crds = crds  # type: ignore[attr-defined]
    return problems


def _qgs_socket(root: Path) -> None:
    """A real listening-capable Unix socket file where tee_host_info looks for the QGS."""
    path = root / QGS
    path.parent.mkdir(parents=True, exist_ok=True)
    here = os.getcwd()
    os.chdir(path.parent)  # bind a short relative name: AF_UNIX paths are limited to 108 bytes
    try:
        with contextlib.closing(socket.socket(socket.AF_UNIX)) as sock:
            sock.bind(path.name)
    finally:
        os.chdir(here)


@pytest.fixture
def render(tmp_path, teesim_node, ansible_playbook_cli):
    """``render(hosts, **cluster_vars) -> (completed process, {file name: object})``.

    ``hosts`` maps inventory names to host vars; ``vendor`` builds the teesim tree, ``qgs`` adds the socket.
    """

    def run(hosts: dict, *args: str, cwd=None, **cluster_vars):
        inventory_hosts = {}
        for name, spec in hosts.items():
            spec = dict(spec)
            hiding = spec.pop("ciphertext_hiding_asids", None)
            extra = ["--ciphertext-hiding-asids", str(hiding)] if hiding is not None else []
            root = teesim_node(tmp_path / "nodes" / name, "--vendor", spec.pop("vendor"), *extra)
            if spec.pop("qgs", False):
                _qgs_socket(root)
            inventory_hosts[name] = {"tee_host_root": str(root), **spec}
        out = tmp_path / "manifests"
        # tee_manifest_dir given (a relative one is read against cwd): the caller reads that directory itself.
        cluster_vars.setdefault("tee_manifest_dir", str(out))
        inventory = {
            "all": {
                "vars": {
                    "ansible_connection": "local",
                    "ansible_python_interpreter": sys.executable,
                    "tee_output": "manifests",
                    **cluster_vars,
                },
                "children": {"tee_nodes": {"hosts": inventory_hosts}},
            }
        }
        inventory_file = tmp_path / "inventory.yml"
        inventory_file.write_text(yaml.safe_dump(inventory))
        proc = ansible_playbook_cli(PLAYBOOK, "-i", str(inventory_file), *args, cwd=cwd)
        files = {}
        if out.is_dir():
            for path in sorted(out.glob("*.yaml")):
                text = path.read_text()
                if text.startswith("# confidential.tee owner: "):  # this collection's files only
                    files[path.name] = yaml.safe_load(text)
        return proc, files

    return run
