"""preflight: the verdict per check on teesim node trees and on edited facts; every FAIL carries a fix."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import HostReader
from ansible_collections.confidential.tee.plugins.module_utils.host.gpu_facts import empty_gpu
from ansible_collections.confidential.tee.plugins.module_utils.host.host_facts import gather_host_facts
from ansible_collections.confidential.tee.plugins.module_utils.host.preflight import (
    FAIL,
    NO_ATTESTATION,
    PASS,
    SKIP,
    attestation_section,
    check,
    combine,
    gather_preflight,
    gpu_section,
    iommu_section,
    preflight_verdict,
)
from teesim.kernel.cli import build_node_tree
from teesim.kernel.node import PciDevice


def preflight(root: Path, min_free: int = 1) -> dict:
    host = HostReader(str(root))
    return gather_preflight(host, gather_host_facts(host), min_free)["preflight"]


def checks(verdict: dict) -> dict[str, dict]:
    return {c["id"]: c for s in verdict["sections"] for c in s["checks"]}


def sections(verdict: dict) -> dict[str, dict]:
    return {s["id"]: s for s in verdict["sections"]}


def test_tdx_node_is_ready(tmp_path):
    verdict = preflight(build_tree(tmp_path, usage={"tdx": 5}))
    assert verdict["ready"] and verdict["verdict"] == PASS and verdict["blocking"] == []
    found = checks(verdict)
    assert [found[i]["verdict"] for i in ("tdx.cpu_flag", "tdx.kvm", "tdx.hibernation", "tdx.keys")] == [PASS] * 4
    assert found["keys.free"]["detail"] == "tdx: 58 of 63 free (5 in use)"
    assert sections(verdict)["sev_snp"]["reason"] == "CPU vendor is GenuineIntel: SEV-SNP needs AMD"
    assert sections(verdict)["attestation"]["reason"] == NO_ATTESTATION


def build_tree(tmp_path, name="node", **kwargs) -> Path:
    root = tmp_path / name
    build_node_tree(root, **kwargs)
    return root


def test_free_keys_below_the_threshold_fail_with_a_fix(tmp_path):
    verdict = preflight(build_tree(tmp_path, usage={"tdx": 62}), min_free=4)
    free = checks(verdict)["keys.free"]
    assert free["verdict"] == FAIL and free["detail"] == "tdx: 1 of 63 free (62 in use)"
    assert "cordon" in free["remediation"]
    assert not verdict["ready"] and verdict["verdict"] == FAIL


def test_old_kernel_without_the_tdx_resource_falls_back_to_the_hardware_clearly_marked(tmp_path):
    root = build_tree(tmp_path, profile="old", capacity={"tdx": 31}, tdx_misc=False, registers=True)
    verdict = preflight(root)
    keys = checks(verdict)["tdx.keys"]
    assert keys["verdict"] == PASS and keys["source"] == "hardware"
    assert keys["detail"].startswith("31 TDX guest keys from the hardware (MSR 0x87 IA32_MKTME_KEYID_PARTITIONING: 31")
    assert "FROM THE HARDWARE, NOT THE KERNEL" in keys["detail"] and "predates the tdx misc resource" in keys["detail"]
    assert checks(verdict)["keys.free"]["verdict"] == SKIP
    assert verdict["ready"]


def test_old_kernel_without_readable_msr_cannot_tell(tmp_path):
    root = build_tree(tmp_path, profile="old", capacity={"tdx": 31}, tdx_misc=False)
    keys = checks(preflight(root))["tdx.keys"]
    assert keys["verdict"] == SKIP and "msr driver is not loaded" in keys["detail"]


def test_new_kernel_with_keys_in_the_bios_but_capacity_zero_fails(tmp_path):
    root = build_tree(tmp_path, capacity={"tdx": 63}, tdx_misc=False, registers=True)
    keys = checks(preflight(root))["tdx.keys"]
    # 6.16 has the resource: hardware keys without misc capacity means TDX did not come up in KVM.
    assert keys["verdict"] == FAIL and "kernel reports TDX capacity 0" in keys["detail"]
    assert "dmesg | grep -i tdx" in keys["remediation"]
    # What 6.x and 7.1+ print, quoted for people; nothing decides from it.
    assert "'virt/tdx: module initialized'" in keys["remediation"]
    assert "'virt/tdx: TDX-Module initialized' at boot" in keys["remediation"]


def test_no_tdx_keyids_in_the_bios(tmp_path):
    root = build_tree(tmp_path, profile="old", capacity={"tdx": 0}, tdx_misc=False, registers=True)
    keys = checks(preflight(root))["tdx.keys"]
    assert keys["verdict"] == FAIL and "the BIOS assigned 0 TDX KeyIDs" in keys["detail"]


def test_kernel_without_kvm_tdx_is_not_ready(tmp_path):
    verdict = preflight(build_tree(tmp_path, profile="no-misc", kvm_tdx="absent"))
    found = checks(verdict)
    assert found["tdx.kvm"]["verdict"] == FAIL
    assert found["tdx.kvm"]["remediation"].startswith("boot a kernel whose KVM supports TDX")
    assert found["tdx.keys"]["verdict"] == SKIP and "no misc cgroup controller" in found["tdx.keys"]["detail"]
    assert not verdict["ready"] and any(b.startswith("tdx.kvm FAIL") for b in verdict["blocking"])


def test_hibernation_available_fails(tmp_path):
    root = build_tree(tmp_path)
    (root / "sys/power/state").write_text("freeze mem disk\n")
    hibernation = checks(preflight(root))["tdx.hibernation"]
    assert hibernation["verdict"] == FAIL and "nohibernate" in hibernation["remediation"]


def test_virtual_machine_skips_the_rest_of_tdx(tmp_path):
    root = build_tree(tmp_path)
    cpuinfo = (root / "proc/cpuinfo").read_text()
    (root / "proc/cpuinfo").write_text(cpuinfo.replace(" tdx_host_platform", " hypervisor"))
    found = checks(preflight(root))
    assert found["tdx.cpu_flag"]["verdict"] == FAIL and found["tdx.cpu_flag"]["remediation"] == "run on bare metal"
    assert {found[i]["verdict"] for i in ("tdx.kvm", "tdx.hibernation", "tdx.keys")} == {SKIP}


def test_snp_node_with_matching_asid_split(tmp_path):
    verdict = preflight(build_tree(tmp_path, vendor="amd", usage={"sev_es": 3}, registers=True))
    found = checks(verdict)
    assert verdict["ready"] and verdict["technology"] == "SEV-SNP"
    assert found["sev.asids"]["verdict"] == PASS
    assert found["sev.asids"]["detail"].startswith("max ASID 509, min SEV ASID 100 (sev_es = 100 - 1)")
    assert found["keys.free"]["detail"] == "sev_es: 96 of 99 free (3 in use)"


def test_asid_split_disagreeing_with_misc_capacity_fails(tmp_path):
    root = build_tree(tmp_path, vendor="amd", registers=True)
    (root / "sys/fs/cgroup/misc.capacity").write_text("sev 410\nsev_es 50\n")
    asids = checks(preflight(root))["sev.asids"]
    assert asids["verdict"] == FAIL and "sev_es: CPUID gives 99, misc.capacity 50" in asids["detail"]


def test_snp_with_iommu_passthrough_fails(tmp_path):
    root = build_tree(tmp_path, vendor="amd")
    for group in (root / "sys/kernel/iommu_groups").iterdir():
        (group / "type").write_text("identity\n")
    iommu = checks(preflight(root))["sev.iommu"]
    assert iommu["verdict"] == FAIL and "iommu=pt" in iommu["remediation"]


def test_snp_without_dev_sev_fails(tmp_path):
    root = build_tree(tmp_path, vendor="amd")
    (root / "dev/sev").unlink()
    device = checks(preflight(root))["sev.device"]
    assert device["verdict"] == FAIL and device["remediation"] == "load the PSP driver (`modprobe ccp`)"


def test_missing_vhost_vsock_fails(tmp_path):
    root = build_tree(tmp_path)
    (root / "dev/vhost-vsock").unlink()
    vsock = checks(preflight(root))["vsock.vhost"]
    assert vsock["verdict"] == FAIL and "role confidential.tee.vsock" in vsock["remediation"]


def test_nvidia_devices_must_be_grouped_and_on_vfio(tmp_path):
    devices = (
        PciDevice("0000:17:00.0", "0x10de", "0x2330", "0x030200", "vfio-pci", 12),
        PciDevice("0000:18:00.0", "0x10de", "0x2330", "0x030200", "nvidia", 13),
        PciDevice("0000:19:00.0", "0x10de", "0x22a3", "0x068000", "nvidia", None),
        PciDevice("0000:00:00.0", "0x8086", "0x09a2", "0x060000", None, 0),
    )
    found = checks(preflight(build_tree(tmp_path, pci=devices)))
    assert found["iommu.gpu_groups"]["verdict"] == FAIL
    assert found["iommu.gpu_groups"]["detail"] == "not in an IOMMU group: 0000:19:00.0 (nvidia)"
    assert found["iommu.gpu_vfio"]["detail"] == "not on vfio-pci: 0000:18:00.0 (nvidia), 0000:19:00.0 (nvidia)"
    bound = tuple(PciDevice(d.bdf, d.vendor, d.device, d.pci_class, "vfio-pci", 20 + n) for n, d in enumerate(devices))
    found = checks(preflight(build_tree(tmp_path, "bound", pci=bound)))
    assert (found["iommu.gpu_groups"]["verdict"], found["iommu.gpu_vfio"]["verdict"]) == (PASS, PASS)


def test_no_nvidia_device_skips_the_gpu_passthrough_checks(tmp_path):
    found = checks(preflight(build_tree(tmp_path)))
    assert found["iommu.gpu_vfio"]["verdict"] == SKIP
    assert (
        found["iommu.gpu_vfio"]["detail"]
        == "no NVIDIA GPU or NVSwitch on the PCI bus (/sys/bus/pci/devices lists none)"
    )


def _gpu(**values) -> dict:
    gpu = empty_gpu()
    gpu.update(probed=True, present=True, **values)
    return gpu


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({"cc_capable": True, "cc_enabled": False, "cc_state": "OFF", "ready_state": "not-ready"}, [PASS, FAIL, FAIL]),
        ({"cc_capable": True, "cc_enabled": True, "cc_state": "ON", "ready_state": "ready"}, [PASS, PASS, PASS]),
        (
            {"cc_capable": True, "cc_enabled": True, "cc_state": "DEVTOOLS", "devtools": True, "ready_state": "ready"},
            [PASS, FAIL, PASS],
        ),
        ({"cc_capable": False, "cc_enabled": None, "ready_state": None}, [FAIL, SKIP, SKIP]),
    ],
)
def test_gpu_confidential_computing(values, expected):
    section = gpu_section({"gpu": _gpu(**values)})
    assert [c["verdict"] for c in section["checks"]] == expected


def test_gpu_not_probed_skips_with_the_reason():
    section = gpu_section({"gpu": empty_gpu("not gathered: gather_gpu is false")})
    assert section["verdict"] == SKIP and section["reason"] == "not gathered: gather_gpu is false"


@pytest.mark.parametrize(
    ("given", "verdict"),
    [
        ({"verdict": "pass", "msg": "quote verified"}, PASS),
        ({"ok": False, "msg": "TCB out of date", "remediation": "update the microcode"}, FAIL),
        ({"failed": True, "msg": "no PCCS"}, FAIL),
        ({"ok": True}, PASS),
        ({"msg": "nothing to say"}, SKIP),
    ],
)
def test_attestation_results_plug_in(given, verdict):
    result = attestation_section(given)["checks"][0]
    assert result["verdict"] == verdict
    assert (result["remediation"] is not None) == (verdict == FAIL)


def test_iommu_off_only_fails_where_passthrough_is_needed(tmp_path):
    root = build_tree(tmp_path)
    facts = gather_host_facts(HostReader(str(root)))
    facts["iommu"]["enabled"] = False
    assert iommu_section(facts)["checks"][0]["verdict"] == SKIP
    gpu = {
        "bdf": "b",
        "vendor": "0x10de",
        "device": "0x2330",
        "class": "0x0302",
        "driver": "nvidia",
        "iommu_group": None,
    }
    facts["pci"] = {"readable": True, "devices": [gpu]}
    assert iommu_section(facts)["checks"][0]["verdict"] == FAIL


def test_a_fail_without_a_fix_is_refused():
    with pytest.raises(ValueError):
        check("x", "x", FAIL, "broken")


def test_combine():
    assert (combine([PASS, SKIP]), combine([SKIP]), combine([PASS, FAIL, SKIP])) == (PASS, SKIP, FAIL)
    assert combine([]) == SKIP


def test_table_lines_have_fixes_for_failures(tmp_path):
    root = build_tree(tmp_path, profile="no-misc", kvm_tdx="absent")
    table = preflight(root)["table"]
    assert table[0].startswith("FAIL  NOT READY for TDX guests; ")
    assert any(line.strip().startswith("fix: boot a kernel whose KVM supports TDX") for line in table)


def test_unknown_vendor_is_never_ready(tmp_path):
    facts = gather_host_facts(HostReader(str(build_tree(tmp_path))))
    facts = copy.deepcopy(facts)
    facts["tee_vendor"], facts["cpu"]["vendor"] = None, None
    verdict = preflight_verdict(facts, {"misc_controller": {"present": False}}, {})
    assert verdict["ready"] is False and verdict["technology"] is None
    assert sections(verdict)["tdx"]["reason"].startswith("CPU vendor unknown")


def test_a_cpu_without_asids_says_so(tmp_path):
    root = build_tree(tmp_path, vendor="amd", capacity={"sev": 0, "sev_es": 0}, registers=True)
    asids = checks(preflight(root))["sev.asids"]
    assert asids["verdict"] == PASS and asids["detail"].startswith("CPUID 0x8000001F offers no ASIDs (max ASID 0")


@pytest.mark.parametrize(
    ("vendor", "resource", "check_id"), [("intel", "tdx", "tdx.keys"), ("amd", "sev_es", "sev.keys")], ids=str
)
@pytest.mark.parametrize(
    "spoil",
    [
        lambda path: path.write_bytes(b"tdx sixty\nsev_es x\n"),
        lambda path: path.write_bytes(b"\xff\xfe\x00garbage"),
        lambda path: (path.unlink(), path.mkdir()),
    ],
    ids=["garbage", "binary", "directory"],
)
def test_an_unreadable_misc_capacity_is_unknown_because_never_capacity_0(tmp_path, vendor, resource, check_id, spoil):
    root = build_tree(tmp_path, vendor=vendor)
    spoil(root / "sys/fs/cgroup/misc.capacity")
    verdict = preflight(root)
    keys = checks(verdict)[check_id]
    assert keys["verdict"] == SKIP and keys["detail"].startswith(f"{resource} capacity unknown, because ")
    assert "misc.capacity" in keys["detail"] and "capacity is 0" not in keys["detail"]
    assert "BIOS" not in keys["detail"] and "host_root" in keys["detail"]
    assert not verdict["ready"]


def test_an_empty_misc_capacity_is_the_kernel_saying_no_keys(tmp_path):
    root = build_tree(tmp_path)
    (root / "sys/fs/cgroup/misc.capacity").write_text("")
    keys = checks(preflight(root))["tdx.keys"]
    assert keys["verdict"] == FAIL and "capacity is 0" in keys["detail"]
