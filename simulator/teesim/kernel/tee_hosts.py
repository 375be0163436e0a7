"""What a simulated host of each TEE looks like: one :class:`HostProfile` per technology of the collection's TEE
registry (``plugins/module_utils/common/tee_registry.py``, whose ``teesim_profile`` names the entry here).

A profile holds the host's default misc capacity, its CPU (``/proc/cpuinfo``), the kernel command line the TEE's
host role leaves (``proc/cmdline`` and Debian's ``etc/default/grub``), ``sys/power/state``, and two functions: the
KVM module's parameter and device files, and the register files of ``registers=True``. :mod:`teesim.kernel.node`
renders every host through it and branches on no vendor. A new TEE is one entry in :data:`PROFILES`.

The files follow the kernels named in :mod:`teesim.kernel.node`'s docstring: ``kvm_intel``'s ``tdx`` parameter
(``auto``: Y when there are TDX keys), ``kvm_amd``'s ``sev``/``sev_es``/``sev_snp`` (``sev_hardware_setup()``
enables SEV whenever the CPU offers ASIDs), MSR 0x87 and CPUID leaf 0x8000001F at the msr and cpuid drivers'
offsets.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from teesim._collection import tee_registry

_BASE_FLAGS = "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2"
MSR_KEYID_PARTITIONING = 0x87
CPUID_SEV_LEAF = 0x8000001F

# spec: the node's NodeSpec (typed Any: node.py imports this module); capacity: its resolved misc capacity.
ModuleFiles = Callable[[Any, Mapping[str, int]], dict[str, str]]
Registers = Callable[[Any, Mapping[str, int]], dict[str, tuple[int, bytes]]]


@dataclass(frozen=True)
class HostProfile:
    """One TEE's simulated host: the files that differ between technologies."""

    capacity: Mapping[str, int]
    cpu: Mapping[str, str]
    cmdline: str
    power_state: str
    module_files: ModuleFiles
    registers: Registers


def _tdx_module_files(spec: Any, capacity: Mapping[str, int]) -> dict[str, str]:
    files = {}
    tdx = {"auto": "Y" if capacity.get("tdx") else "N"}.get(spec.kvm_tdx, spec.kvm_tdx)
    if tdx != "absent":
        files["sys/module/kvm_intel/parameters/tdx"] = tdx + "\n"
    files["sys/module/kvm_intel/parameters/nested"] = "Y\n"
    return files


def _tdx_registers(spec: Any, capacity: Mapping[str, int]) -> dict[str, tuple[int, bytes]]:
    # IA32_MKTME_KEYID_PARTITIONING: MKTME KeyIDs in bits 31:0, TDX KeyIDs (capacity + the module's global one) 63:32.
    tdx_keyids = capacity.get("tdx", 0) + 1 if capacity.get("tdx") else 0
    value = (tdx_keyids << 32) | spec.mktme_keyids
    return {"dev/cpu/0/msr": (MSR_KEYID_PARTITIONING, value.to_bytes(8, "little"))}


def _snp_module_files(spec: Any, capacity: Mapping[str, int]) -> dict[str, str]:
    any_asids = capacity.get("sev") or capacity.get("sev_es")
    enabled = "Y\n" if capacity.get("sev_es") else "N\n"
    files = {
        "dev/sev": "",
        "sys/module/kvm_amd/parameters/sev": "Y\n" if any_asids else "N\n",
        "sys/module/kvm_amd/parameters/sev_es": enabled,
        "sys/module/kvm_amd/parameters/sev_snp": enabled,
    }
    if spec.ciphertext_hiding_asids is not None:
        snp = min(spec.ciphertext_hiding_asids, capacity.get("sev_es", 0))
        files["sys/module/kvm_amd/parameters/ciphertext_hiding_asids"] = f"{snp}\n"
    return files


def _snp_registers(spec: Any, capacity: Mapping[str, int]) -> dict[str, tuple[int, bytes]]:
    sev, sev_es = capacity.get("sev", 0), capacity.get("sev_es", 0)
    # EAX: SME, SEV, SEV-ES, SEV-SNP (bits 0, 1, 3, 4); EBX: C-bit 51; ECX max ASID; EDX min SEV ASID.
    return {"dev/cpu/0/cpuid": (CPUID_SEV_LEAF, struct.pack("<4I", 0b11011, 51, sev + sev_es, sev_es + 1))}


PROFILES: dict[str, HostProfile] = {
    "tdx": HostProfile(
        capacity={"tdx": 63},
        cpu={
            "vendor_id": "GenuineIntel",
            "model name": "Intel(R) Xeon(R) Platinum 8580 (simulated by teesim)",
            "flags": f"{_BASE_FLAGS} ht syscall nx lm constant_tsc vmx tme tdx_host_platform",
        },
        cmdline="BOOT_IMAGE=/boot/vmlinuz root=/dev/sda1 ro quiet kvm_intel.tdx=1 nohibernate",
        power_state="freeze mem",  # nohibernate
        module_files=_tdx_module_files,
        registers=_tdx_registers,
    ),
    "sev-snp": HostProfile(
        capacity={"sev": 410, "sev_es": 99},
        cpu={
            "vendor_id": "AuthenticAMD",
            "model name": "AMD EPYC 9654 96-Core Processor (simulated by teesim)",
            "flags": f"{_BASE_FLAGS} ht syscall nx lm constant_tsc svm sme sev sev_es sev_snp",
        },
        cmdline="BOOT_IMAGE=/boot/vmlinuz root=/dev/sda1 ro quiet mem_encrypt=on kvm_amd.sev=1",
        power_state="freeze mem disk",
        module_files=_snp_module_files,
        registers=_snp_registers,
    ),
}


def host_profile(vendor: str) -> HostProfile:
    """The simulated host of ``vendor``'s TEE, or ``ValueError`` naming the vendors there are."""
    tech = tee_registry.of_vendor(vendor)
    if tech is None or tech.teesim_profile not in PROFILES:
        raise ValueError(f"unknown vendor {vendor!r}; choose {tee_registry.vendor_choices()}")
    return PROFILES[tech.teesim_profile]
