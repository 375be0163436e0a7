"""hardware_keys: MSR 0x87 and CPUID 0x8000001F split the way the kernel splits them, read through read_at."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import HostReader
from ansible_collections.confidential.tee.plugins.module_utils.host.hardware_keys import (
    cross_check_asids,
    expected_asid_capacity,
    gather_hardware_keys,
    kernel_counts_tdx,
    parse_keyid_partitioning,
    parse_sev_cpuid,
    read_sev_asids,
    read_tdx_keyids,
)


def register_file(root: Path, rel: str, offset: int, data: bytes) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as handle:
        handle.seek(offset)
        handle.write(data)


def msr(root: Path, mktme: int, tdx: int, cpu: int = 0) -> None:
    register_file(root, f"dev/cpu/{cpu}/msr", 0x87, ((tdx << 32) | mktme).to_bytes(8, "little"))


def cpuid(root: Path, eax: int, ebx: int, ecx: int, edx: int) -> None:
    register_file(root, "dev/cpu/0/cpuid", 0x8000001F, struct.pack("<4I", eax, ebx, ecx, edx))


def test_keyid_partitioning_low_half_mktme_high_half_tdx_one_global_keyid():
    parsed = parse_keyid_partitioning(((64 << 32) | 63).to_bytes(8, "little"))
    assert parsed == {
        "raw": "0x000000400000003f",
        "mktme_keyids": 63,
        "tdx_keyids": 64,
        "tdx_guest_keyids": 63,
        # TDX KeyIDs start after the last MKTME KeyID: [64, 127].
        "tdx_keyid_range": [64, 127],
    }


@pytest.mark.parametrize(("tdx", "guests"), [(0, 0), (1, 0), (2, 1), (0xFFFFFFFF, 0xFFFFFFFE)])
def test_keyid_partitioning_edges(tdx, guests):
    assert parse_keyid_partitioning(((tdx << 32) | 7).to_bytes(8, "little"))["tdx_guest_keyids"] == guests


def test_sev_cpuid_fields_and_the_asid_split():
    parsed = parse_sev_cpuid(struct.pack("<4I", 0b11011, 0x2F | (5 << 6), 509, 100))
    assert parsed["features"] == {"sme": True, "sev": True, "sev_es": True, "sev_snp": True}
    assert parsed["c_bit"] == 47
    assert (parsed["max_asid"], parsed["min_sev_asid"]) == (509, 100)
    # ASIDs 1..99 are SEV-ES/SNP, 100..509 SEV: the kernel's misc capacities.
    assert parsed["expected_capacity"] == {"sev": 410, "sev_es": 99}


@pytest.mark.parametrize(
    ("max_asid", "min_sev_asid", "expected"),
    [
        (0, 0, {"sev": 0, "sev_es": 0}),  # no SEV at all: KVM stops before setting any capacity
        (509, 1, {"sev": 509, "sev_es": 0}),  # no SEV-ES ASID space in the BIOS
        (99, 100, {"sev": 0, "sev_es": 99}),  # every ASID is an SEV-ES ASID: no sev line in misc.capacity
        (99, 150, {"sev": 0, "sev_es": 149}),
    ],
)
def test_expected_asid_capacity(max_asid, min_sev_asid, expected):
    assert expected_asid_capacity(max_asid, min_sev_asid) == expected


def test_read_tdx_keyids_from_the_first_cpu_with_a_register(tmp_path):
    msr(tmp_path, 31, 32, cpu=2)
    (tmp_path / "dev/cpu/10").mkdir(parents=True)
    found = read_tdx_keyids(HostReader(str(tmp_path)))
    assert found["readable"] and found["path"] == f"{tmp_path}/dev/cpu/2/msr"
    assert (found["mktme_keyids"], found["tdx_keyids"], found["tdx_guest_keyids"]) == (31, 32, 31)


def test_read_tdx_keyids_without_the_msr_driver_says_so(tmp_path):
    found = read_tdx_keyids(HostReader(str(tmp_path)))
    assert found["readable"] is False and found["tdx_guest_keyids"] is None
    assert "msr driver is not loaded" in found["problem"]


def test_read_tdx_keyids_short_register_is_not_a_number(tmp_path):
    register_file(tmp_path, "dev/cpu/0/msr", 0x87, b"\x01\x02\x03")
    found = read_tdx_keyids(HostReader(str(tmp_path)))
    assert found["readable"] is False and found["tdx_keyids"] is None
    assert found["problem"] == "only 3 of 8 bytes at offset 0x87"


def test_read_sev_asids(tmp_path):
    cpuid(tmp_path, 0b11011, 51, 99, 100)
    found = read_sev_asids(HostReader(str(tmp_path)))
    assert found["readable"] and found["expected_capacity"] == {"sev": 0, "sev_es": 99}


KVM_ALL = {"loaded": True, "sev": True, "sev_es": True, "sev_snp": True}


def test_cross_check_agrees_and_disagrees():
    parsed = {"expected_capacity": {"sev": 410, "sev_es": 99}}
    same = {"sev": {"capacity": 410}, "sev_es": {"capacity": 99}}
    assert cross_check_asids(parsed, same, KVM_ALL)["agrees"] is True
    changed = {"sev": {"capacity": 410}, "sev_es": {"capacity": 50}}
    result = cross_check_asids(parsed, changed, KVM_ALL)
    assert result["agrees"] is False and result["mismatches"] == ["sev_es"]
    # KVM sets no sev_es capacity when SEV-ES is off: 0 is then expected, not a mismatch.
    off = {"sev": {"capacity": 410}, "sev_es": {"capacity": 0}}
    assert cross_check_asids(parsed, off, dict(KVM_ALL, sev_es=False))["agrees"] is True
    unknown = {"sev": {"capacity": None}, "sev_es": {"capacity": 99}}
    assert cross_check_asids(parsed, unknown, KVM_ALL)["agrees"] is None


@pytest.mark.parametrize(
    ("version", "present", "tdx", "counted"),
    [
        ([6, 16, 0], True, 63, True),
        ([6, 16, 0], True, 0, True),  # resource exists, TDX not initialised
        ([6, 1, 0], True, 0, False),  # predates the resource
        ([6, 1, 0], True, 31, True),  # a vendor backport with the resource
        ([6, 16, 0], False, None, False),  # no misc controller
        (None, True, 0, None),
    ],
)
def test_kernel_counts_tdx(version, present, tdx, counted):
    capacity = {"misc_controller": {"present": present, "reason": "x"}, "resources": {"tdx": {"capacity": tdx}}}
    assert kernel_counts_tdx({"version": version, "release": "r"}, capacity)[0] is counted


def test_gather_reads_only_what_answers_a_question(tmp_path):
    msr(tmp_path, 31, 64)
    cpuid(tmp_path, 0b11011, 51, 509, 100)
    reader = HostReader(str(tmp_path))
    kvm = {"amd": KVM_ALL}
    intel = {"tee_vendor": "intel", "kernel": {"version": [6, 16, 0]}, "kvm": kvm}
    counted = {"misc_controller": {"present": True}, "resources": {"tdx": {"capacity": 63}}}
    assert gather_hardware_keys(reader, intel, counted)["tdx"] is None  # the kernel already counts
    uncounted = {"misc_controller": {"present": True}, "resources": {"tdx": {"capacity": 0}}}
    old = dict(intel, kernel={"version": [6, 1, 0], "release": "6.1.0"})
    found = gather_hardware_keys(reader, old, uncounted)
    assert found["tdx"]["tdx_guest_keyids"] == 63 and found["tdx_misc_resource"] is False
    amd = {"tee_vendor": "amd", "kvm": kvm}
    sev = gather_hardware_keys(reader, amd, {"resources": {"sev": {"capacity": 410}, "sev_es": {"capacity": 99}}})
    assert sev["tdx"] is None and sev["sev"]["cross_check"]["agrees"] is True
    assert gather_hardware_keys(reader, {"tee_vendor": None}, {}) == {
        "tdx": None,
        "sev": None,
        "tdx_misc_resource": None,
        "tdx_misc_reason": None,
    }
