"""The roles' MachineConfig output (playbooks/render_machineconfigs.yml) against the real CRD."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from ansible_collections.confidential.tee.plugins.module_utils.boot import machineconfig as mc

jsonschema = pytest.importorskip("jsonschema")

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def schema(reference):
    ref = reference  # tests/conftest.py skips with a reason when ../shared/reference is absent
    if not (ref / "crds" / "machineconfigs.yaml").is_file():
        pytest.skip("../shared/reference/crds/machineconfigs.yaml is absent: no CRD to validate against")
    crd = yaml.safe_load((ref / "crds" / "machineconfigs.yaml").read_text())
    served = [v for v in crd["spec"]["versions"] if v.get("served")]
    assert served, "the CRD serves no version"
    return served[0]["name"], served[0]["schema"]["openAPIV3Schema"]


def unknown_fields(obj, schema, where="") -> list[str]:
    """Fields the API server would silently prune: a typo such as kernelArgs vanishes without error."""
    if schema.get("x-kubernetes-preserve-unknown-fields") or not isinstance(obj, dict | list):
        return []
    if isinstance(obj, list):
        return [p for i, item in enumerate(obj) for p in unknown_fields(item, schema.get("items", {}), f"{where}[{i}]")]
    props = schema.get("properties")
    if props is None:
        return []
    out = []
    for key, value in obj.items():
        if key not in props:
            out.append(f"{where}.{key}")
        else:
            out.extend(unknown_fields(value, props[key], f"{where}.{key}"))
    return out


@pytest.fixture
def render(tmp_path, ansible_playbook_cli):
    def run(vendor, role="worker"):
        out = tmp_path / vendor
        proc = ansible_playbook_cli(
            REPO / "playbooks" / "render_machineconfigs.yml",
            extra_vars={"tee_manifest_dir": out, "tee_cpu_vendor": vendor, "tee_machineconfig_role": role},
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        return {p.name: yaml.safe_load(p.read_text()) for p in sorted(out.glob("*.yaml"))}

    return run


@pytest.mark.slow
@pytest.mark.parametrize(
    "vendor, role, expected",
    [
        (
            "intel",
            "worker",
            {
                "99-worker-confidential-tee-tdx.yaml": ["kvm_intel.tdx=1", "nohibernate"],
                "99-worker-confidential-tee-iommu.yaml": ["intel_iommu=on"],
                "99-worker-confidential-tee-vsock.yaml": None,
            },
        ),
        (
            "amd",
            "master",
            {
                "99-master-confidential-tee-snp.yaml": ["kvm_amd.sev=1", "kvm_amd.sev_es=1", "kvm_amd.sev_snp=1"],
                "99-master-confidential-tee-iommu.yaml": None,
                "99-master-confidential-tee-vsock.yaml": None,
            },
        ),
    ],
)
def test_rendered_machineconfigs_validate_against_the_crd(render, schema, vendor, role, expected):
    version, openapi = schema
    manifests = render(vendor, role)
    assert set(manifests) == set(expected)
    validator = jsonschema.Draft4Validator(openapi)
    for name, manifest in manifests.items():
        errors = [f"{'.'.join(map(str, e.path))}: {e.message}" for e in validator.iter_errors(manifest)]
        assert errors == [], name
        assert unknown_fields(manifest, openapi) == [], name
        assert manifest["apiVersion"] == f"machineconfiguration.openshift.io/{version}"
        assert manifest["metadata"]["labels"]["machineconfiguration.openshift.io/role"] == role
        assert manifest["spec"].get("kernelArguments") == expected[name], name
        assert mc.ignition_problems(manifest["spec"]["config"]) == [], name
    files = {
        f["path"]: mc.decode_data_url(f["contents"]["source"])
        for m in manifests.values()
        for f in m["spec"]["config"].get("storage", {}).get("files", [])
    }
    assert files["/etc/modules-load.d/vsock.conf"].splitlines()[1:] == ["vhost_vsock", "vsock_loopback"]
    assert files["/etc/modules-load.d/vfio.conf"].splitlines()[1:] == ["vfio", "vfio_iommu_type1", "vfio_pci"]
    if vendor == "intel":
        assert "options kvm_intel tdx=1" in files["/etc/modprobe.d/confidential-tee-tdx.conf"].splitlines()
    assert not any("amd_iommu" in arg for m in manifests.values() for arg in m["spec"].get("kernelArguments", []))


def test_unknown_field_check_can_fail(schema):
    _, openapi = schema
    assert unknown_fields({"spec": {"kernelArgs": ["x"], "config": {"anything": 1}}}, openapi) == [".spec.kernelArgs"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "variable, names",
    [
        ("vsock_modules", ["vhost_vsock", "vsock_loopback\nblacklist_line"]),
        ("iommu_passthrough_vfio_modules", ["vfio", "-r"]),
        ("iommu_passthrough_vfio_modules", ["vfio", "../../etc/evil"]),
    ],
)
def test_a_module_name_that_would_add_a_line_to_a_machineconfig_is_refused(
    tmp_path, ansible_playbook_cli, variable, names
):
    out = tmp_path / "manifests"
    proc = ansible_playbook_cli(
        REPO / "playbooks" / "render_machineconfigs.yml",
        "-e",
        json.dumps({"tee_manifest_dir": str(out), "tee_cpu_vendor": "intel", variable: names}),
    )

    assert proc.returncode != 0
    flat = " ".join(proc.stdout.split())
    assert f"{variable}: " in flat and "is not a kernel module name" in flat, flat[-3000:]
    # Every role's inputs are checked before any role renders: no manifest, not even the TDX one, is left behind.
    assert not out.exists() or not any(out.iterdir())
