"""The host roles' plans: their input checks and their kernel_cmdline / kernel_modules requests, from the roles'
own defaults (templated values given as the roles' templates would render them)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible_collections.confidential.tee.plugins.module_utils.boot import host_roles

ROLES = Path(__file__).resolve().parents[5] / "roles"
RENDERED = {
    "output": "host",
    "state": "present",
    "cpu_vendor": "intel",
    "machineconfig_role": "worker",
    "machineconfig_dir": "machineconfigs",
}


def values(role: str, **given) -> dict:
    """The role's defaults, the templated ones rendered as with an empty inventory, then ``given``."""
    found = yaml.safe_load((ROLES / role / "defaults" / "main.yml").read_text())
    for key in RENDERED:
        if f"{role}_{key}" in found:
            found[f"{role}_{key}"] = RENDERED[key]
    modules = found.get(f"{role}_modules", found.get(f"{role}_vfio_modules"))
    if modules is not None:
        found[f"{role}_modules_load_content"] = "# Managed\n" + "".join(f"{m}\n" for m in modules)
    return found | {f"{role}_{key}": value for key, value in given.items()}


def context(role: str, **given) -> dict:
    specs = yaml.safe_load((ROLES / role / "meta" / "argument_specs.yml").read_text())
    return {"options": specs["argument_specs"]["main"]["options"], "host_root": "/", "host": "node-1"} | given


def configured(passthrough: bool) -> dict:
    remedy = {"needed": passthrough, "present": [], "absent": ["iommu=pt"] if passthrough else []}
    facts = {"iommu_passthrough_remedy": remedy, "iommu": {"passthrough_args": ["iommu=pt"] if passthrough else []}}
    return {"configured_facts": facts, "source": "/etc/kernel/cmdline"}


def test_tdx_asks_for_its_arguments_in_its_drop_in():
    plan = host_roles.plan("tdx_host", values("tdx_host", extra_kernel_args=["quiet"]), context("tdx_host"))
    assert plan["problems"] == [] and plan["modules"] is None
    assert plan["cmdline"] == {
        "name": "90-confidential-tee-tdx",
        "present": ["kvm_intel.tdx=1", "nohibernate", "quiet"],
        "absent": [],
    }
    reverted = host_roles.plan("tdx_host", values("tdx_host", state="absent"), context("tdx_host"))["cmdline"]
    assert reverted["present"] == [] and reverted["absent"] == ["kvm_intel.tdx=1", "nohibernate"]


@pytest.mark.parametrize(
    ("role", "given", "message"),
    [
        ("tdx_host", {"output": "machineconfig", "state": "absent"}, "a MachineConfig is reverted by deleting it"),
        ("tdx_host", {"extra_kernel_args": "a,b"}, "tdx_host_extra_kernel_args must be a list, got the string 'a,b'"),
        ("snp_host", {"extra_kernel_args": ["iommu=pt"]}, "must leave SEV-SNP usable: iommu=pt makes the IOMMU"),
        ("iommu_passthrough", {"cpu_vendor": "arm"}, "got output=host, vendor=arm, state=present; arguments valid)."),
        ("iommu_passthrough", {"vfio_modules": ["vfio", "-r"]}, "iommu_passthrough_vfio_modules: '-r' is not"),
        ("vsock", {"output": "daemonset"}, "vsock_output must be host or machineconfig, got daemonset (on node-1)"),
    ],
)
def test_bad_inputs_are_refused_with_the_roles_messages(role, given, message):
    plan = host_roles.plan(role, values(role, **given), context(role))
    assert plan["cmdline"] is None and plan["modules"] is None
    assert len(plan["problems"]) == 1 and message in plan["problems"][0], plan["problems"]


def test_snp_asks_for_the_configured_read_then_refuses_passthrough():
    first = host_roles.plan("snp_host", values("snp_host"), context("snp_host"))
    assert first["problems"] == [] and first["cmdline"] is None
    assert first["configured_read"] == {"name": "90-confidential-tee-snp", "boot_setup": "auto"}
    refused = host_roles.plan("snp_host", values("snp_host"), context("snp_host", configured=configured(True)))
    assert refused["cmdline"] is None
    assert refused["problems"][0].startswith("iommu=pt is configured (/etc/kernel/cmdline): it makes the IOMMU")
    assert "snp_host_remove_iommu_pt: true" in refused["problems"][0]


@pytest.mark.parametrize(
    ("remove", "absent"), [(True, ["amd_iommu=on", "iommu=pt"]), ("yes", ["amd_iommu=on", "iommu=pt"])]
)
def test_snp_removes_passthrough_when_allowed(remove, absent):
    given = values("snp_host", remove_iommu_pt=remove)
    plan = host_roles.plan("snp_host", given, context("snp_host", configured=configured(True)))
    assert plan["problems"] == []
    assert plan["cmdline"]["present"] == ["kvm_amd.sev=1", "kvm_amd.sev_es=1", "kvm_amd.sev_snp=1"]
    assert plan["cmdline"]["absent"] == absent


def test_snp_renders_without_reading_the_host():
    plan = host_roles.plan("snp_host", values("snp_host", output="machineconfig"), context("snp_host"))
    assert plan["problems"] == [] and plan["cmdline"] is None and "configured_read" not in plan


def test_iommu_takes_the_vendors_arguments_and_writes_vfio():
    plan = host_roles.plan("iommu_passthrough", values("iommu_passthrough"), context("iommu_passthrough"))
    assert plan["cmdline"] == {"name": "91-confidential-tee-iommu", "present": ["intel_iommu=on"], "absent": []}
    assert plan["modules"]["path"] == "/etc/modules-load.d/vfio.conf" and plan["modules"]["load"] is True
    assert plan["modules"]["modules"] == ["vfio", "vfio_iommu_type1", "vfio_pci"]
    amd = host_roles.plan(
        "iommu_passthrough", values("iommu_passthrough", cpu_vendor="amd"), context("iommu_passthrough")
    )
    assert amd["cmdline"] is None and amd["modules"]["state"] == "present"  # AMD enables the IOMMU by default


def test_iommu_auto_waits_for_the_host_read():
    given = values("iommu_passthrough", cpu_vendor="auto")
    assert host_roles.plan("iommu_passthrough", given, context("iommu_passthrough"))["vendor"] is None
    read = context("iommu_passthrough", host_info={"tee_vendor": "intel"})
    assert host_roles.plan("iommu_passthrough", given, read)["cmdline"]["present"] == ["intel_iommu=on"]


@pytest.mark.parametrize(
    ("facts", "host_root", "load"),
    [
        ({"virtualization_role": "host", "virtualization_type": "kvm"}, "/", True),
        ({"virtualization_role": "guest", "virtualization_type": "podman"}, "/", False),
        ({}, "/host", False),
    ],
)
def test_modules_load_now_only_on_this_host_outside_a_container(facts, host_root, load):
    for role in ("vsock", "iommu_passthrough"):
        plan = host_roles.plan(role, values(role), context(role, facts=facts, host_root=host_root))
        assert plan["modules"]["load"] is load, role
        assert plan["in_container"] is (facts.get("virtualization_type") == "podman")


def test_nothing_is_loaded_on_a_revert():
    plan = host_roles.plan(
        "iommu_passthrough", values("iommu_passthrough", state="absent"), context("iommu_passthrough")
    )
    assert plan["modules"]["state"] == "absent" and plan["modules"]["load"] is False
    assert plan["cmdline"]["absent"] == ["intel_iommu=on"]


def test_an_unknown_role_is_named():
    with pytest.raises(ValueError, match="not 'kata_runtimeclasses'"):
        host_roles.plan("kata_runtimeclasses", {}, {})
