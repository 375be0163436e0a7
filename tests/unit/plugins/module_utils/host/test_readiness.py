"""readiness: every rule on plain facts, the SNP IOMMU rules against the kernel's spellings included."""

from __future__ import annotations

import pytest
from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import HostReader
from ansible_collections.confidential.tee.plugins.module_utils.host import readiness as rd
from ansible_collections.confidential.tee.plugins.module_utils.host.cmdline import cmdline_facts


def cpu(vendor="AuthenticAMD", **flags):
    names = ("tdx_host_platform", "sev", "sev_es", "sev_snp", "sgx", "sgx_lc", "hypervisor", "tdx_guest")
    return {"vendor": vendor, "flags": {name: flags.get(name, False) for name in names}}


AMD_CPU = cpu(sev=True, sev_es=True, sev_snp=True)
INTEL_CPU = cpu("GenuineIntel", tdx_host_platform=True, sgx=True, sgx_lc=True)
KVM_AMD = {
    "intel": {"loaded": False, "tdx": None},
    "amd": {"loaded": True, "sev": True, "sev_es": True, "sev_snp": True},
}
KVM_INTEL = {
    "intel": {"loaded": True, "tdx": True},
    "amd": {"loaded": False, "sev": None, "sev_es": None, "sev_snp": None},
}
KERNEL = {"release": "6.16.0", "version": [6, 16, 0]}
DEVICES = {"sev": True, "sgx_enclave": True, "sgx_provision": True}
QGS = {"path": "/var/run/tdx-qgs/qgs.socket", "present": True, "is_socket": True}
TRANSLATED = {"enabled": True, "group_types": {"DMA-FQ": 12}}


def snp(line, iommu=None):
    iommu = TRANSLATED if iommu is None else iommu
    return rd.summarize_sev(AMD_CPU, KVM_AMD, cmdline_facts(line), KERNEL, DEVICES, iommu)["snp"]


@pytest.mark.parametrize(
    "line",
    ["iommu=pt", "iommu=nomerge,pt", "iommu=pt,nomerge", "iommu=pt iommu=nomerge", "iommu.passthrough=1"],
)
def test_every_passthrough_spelling_blocks_snp_before_boot(line):
    # No IOMMU groups yet (a node being prepared): the command line is the only answer.
    verdict = snp(line, iommu={"enabled": None, "group_types": {}})
    assert verdict["ready"] is False and verdict["cmdline_ready"] is False
    assert any("passthrough" in reason and line.split()[0] in reason for reason in verdict["reasons"])


def test_the_running_kernels_groups_are_the_truth():
    assert snp("ro")["ready"] is True
    identity = snp("ro", iommu={"enabled": True, "group_types": {"identity": 12}})
    assert identity["ready"] is False and "kernel's build default" in " ".join(identity["reasons"])
    # iommu=pt on the line but the groups translate (iommu=pt was added after boot): the groups decide.
    assert snp("iommu=pt")["ready"] is True


def test_iommu_off_and_v2_page_table_block_snp():
    assert "SEV-SNP requires it" in " ".join(snp("amd_iommu=off")["reasons"])
    assert "pgtbl_v2" in " ".join(snp("amd_iommu=pgtbl_v2")["reasons"])


def test_tdx_names_hibernation_from_the_running_kernel():
    power = {"hibernation_available": True}
    tdx = rd.summarize_tdx(cpu("GenuineIntel"), KVM_INTEL, cmdline_facts("ro"), KERNEL, QGS, power)
    assert tdx["supported"] is False and "/sys/power/state offers disk" in tdx["reasons"][0]
    ready = rd.summarize_tdx(INTEL_CPU, KVM_INTEL, cmdline_facts("kvm_intel.tdx=1 nohibernate"), KERNEL, QGS, {})
    assert ready["ready"] is True and ready["reasons"] == [] and ready["advice"] == []


def test_cmdline_verdict_for_roles():
    good = rd.cmdline_verdict(cmdline_facts("kvm_intel.tdx=1 hibernate=no"))
    assert good["tdx"] == {"ready": True, "reasons": []}
    bad = rd.cmdline_verdict(cmdline_facts("kvm_intel.tdx=0 iommu=pt,nomerge kvm_amd.sev_snp=0 amd_iommu=on"))
    assert len(bad["tdx"]["reasons"]) == 2
    assert len(bad["snp"]["reasons"]) == 2 and "iommu=pt,nomerge" in bad["snp"]["reasons"][0]
    assert "amd_iommu=on" in bad["problems"][0]


def test_vendor_and_boot_verdict():
    assert rd.tee_vendor({"vendor": "GenuineIntel"}) == "intel"
    assert rd.tee_vendor({"vendor": "AuthenticAMD"}) == "amd"
    assert rd.tee_vendor({"vendor": "HygonGenuine"}) is None and rd.tee_vendor({"vendor": None}) is None
    facts = {"tee_vendor": "amd", "cpu": AMD_CPU, "snp": {"ready": False, "reasons": ["x"]}, "tdx": {}}
    assert rd.boot_verdict(facts) == {"ok": False, "vendor": "amd", "technology": "SEV-SNP", "reasons": ["x"]}
    unknown = rd.boot_verdict({"tee_vendor": None, "cpu": {"vendor": "HygonGenuine"}})
    assert unknown["ok"] is False and "HygonGenuine" in unknown["reasons"][0]


# ---------------------------------------------------------------------------------------------------
# TDX readiness: kvm_intel's tdx parameter and the tdx line of misc.capacity, never log text
# ---------------------------------------------------------------------------------------------------


def _tdx_tree(tmp_path, **kwargs):
    from teesim.kernel.cli import build_node_tree

    root = tmp_path / "node"
    build_node_tree(root, **kwargs)
    return root


def _facts_with_capacity(root):
    from ansible_collections.confidential.tee.plugins.module_utils.host.capacity_facts import capacity_facts
    from ansible_collections.confidential.tee.plugins.module_utils.host.host_facts import gather_host_facts

    facts = gather_host_facts(HostReader(str(root)))
    rd.apply_capacity(facts, capacity_facts(HostReader(str(root))))
    return facts


def test_tdx_needs_keyids_in_misc_capacity_as_well_as_kvm_intel_tdx(tmp_path):
    # kvm_intel says Y, but the kernel (6.16+ counts TDX keys) has no tdx line: no TD can get a KeyID.
    root = _tdx_tree(tmp_path, capacity={"tdx": 0}, kvm_tdx="Y")
    facts = _facts_with_capacity(root)
    assert facts["tdx"]["enabled"] is True and facts["tdx"]["misc_capacity"] == 0
    assert facts["tdx"]["ready"] is False and facts["boot"]["ok"] is False
    (reason,) = [r for r in facts["tdx"]["reasons"] if "misc.capacity has no tdx line" in r]
    assert "'virt/tdx: module initialized'" in reason and "'virt/tdx: TDX-Module initialized' at boot" in reason


def test_tdx_ready_from_the_parameter_and_the_capacity_whatever_the_logs_say(tmp_path):
    root = _tdx_tree(tmp_path, capacity={"tdx": 63})
    # A log saying the opposite is not read: readiness never depends on log text.
    (root / "var/log").mkdir(parents=True)
    (root / "var/log/dmesg").write_text("virt/tdx: TDX-Module initialization failed (-5)\n")
    facts = _facts_with_capacity(root)
    assert facts["tdx"]["ready"] is True and facts["tdx"]["misc_capacity"] == 63 and facts["boot"]["ok"] is True


def test_old_kernels_without_the_tdx_resource_are_not_failed_by_the_capacity(tmp_path):
    root = _tdx_tree(tmp_path, profile="old", capacity={"tdx": 31}, tdx_misc=False)
    facts = _facts_with_capacity(root)
    assert not any("misc.capacity has no tdx line" in r for r in facts["tdx"]["reasons"])


def test_the_readiness_code_never_reads_logs():
    from pathlib import Path

    import ansible_collections.confidential.tee.plugins.module_utils.host as host_wing

    for path in Path(host_wing.__file__).parent.glob("*.py"):
        text = path.read_text()
        for log in ("dev/kmsg", "var/log", "journalctl", '"dmesg"', "'dmesg'"):
            assert log not in text, (path.name, log)
