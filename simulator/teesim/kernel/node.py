"""A whole simulated host: the files a TEE node exposes under ``/``, rendered from the kernel model.

Models what the collection's modules and the device plugins read on a real node:

* ``sys/fs/cgroup/cgroup.controllers`` and the misc files of every cgroup (from :class:`MiscController`),
* ``sys/module/kvm_intel/parameters/tdx`` or ``sys/module/kvm_amd/parameters/{sev,sev_es,sev_snp}``,
* ``proc/cpuinfo`` (one processor per CPU, with the TEE flags), ``proc/cmdline``,
  ``proc/sys/kernel/osrelease``, ``etc/hostname``,
* device nodes ``dev/kvm``, ``dev/vhost-vsock`` and, on AMD, ``dev/sev`` as plain (empty) files,
* ``sys/kernel/iommu_groups/<n>/type`` (translated ``DMA-FQ`` domains, as with the IOMMU on and no
  ``iommu=pt``), ``sys/power/state`` (``disk`` only where the command line leaves hibernation available)
  and ``sys/kernel/security/lockdown``.

Simplifications: files are static text except the misc files; device nodes are regular files; only one
CPU model per vendor; no firmware tables; IOMMU groups have no devices.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from teesim._collection import canonical_resource
from teesim.kernel.misc import MiscController
from teesim.kernel.profiles import CURRENT, KernelProfile

CGROUP_ROOT = "sys/fs/cgroup"
VENDOR_RESOURCES: dict[str, tuple[str, ...]] = {"intel": ("tdx",), "amd": ("sev", "sev_es")}
DEFAULT_CAPACITY: dict[str, dict[str, int]] = {"intel": {"tdx": 63}, "amd": {"sev": 410, "sev_es": 99}}

_BASE_FLAGS = "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2"
_CPU: dict[str, dict[str, str]] = {
    "intel": {
        "vendor_id": "GenuineIntel",
        "model name": "Intel(R) Xeon(R) Platinum 8580 (simulated by teesim)",
        "flags": f"{_BASE_FLAGS} ht syscall nx lm constant_tsc vmx tme tdx_host_platform",
    },
    "amd": {
        "vendor_id": "AuthenticAMD",
        "model name": "AMD EPYC 9654 96-Core Processor (simulated by teesim)",
        "flags": f"{_BASE_FLAGS} ht syscall nx lm constant_tsc svm sme sev sev_es sev_snp",
    },
}
IOMMU_GROUPS = 4
_POWER_STATE: dict[str, str] = {"intel": "freeze mem", "amd": "freeze mem disk"}  # nohibernate on Intel only
_CMDLINE: dict[str, str] = {
    "intel": "BOOT_IMAGE=/boot/vmlinuz root=/dev/sda1 ro quiet kvm_intel.tdx=1 nohibernate",
    "amd": "BOOT_IMAGE=/boot/vmlinuz root=/dev/sda1 ro quiet mem_encrypt=on kvm_amd.sev=1",
}


def parse_assignments(items: list[str] | None, what: str) -> dict[str, int]:
    """Parse ``["tdx=63", "snp=10"]`` into ``{"tdx": 63, "sev_es": 10}`` with clear errors."""
    result: dict[str, int] = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not name or not value.isdigit():
            raise ValueError(f"{what} {item!r}: expected RESOURCE=COUNT, e.g. tdx=63")
        result[canonical_resource(name.strip())] = int(value)
    return result


@dataclass(frozen=True)
class NodeSpec:
    """What a simulated host is: name, kernel profile, CPU vendor, capacity, CPUs."""

    name: str = "node-1"
    profile: KernelProfile = CURRENT
    vendor: str = "intel"
    capacity: Mapping[str, int] | None = None
    cpus: int = 4

    def resolved_capacity(self) -> dict[str, int]:
        if self.vendor not in VENDOR_RESOURCES:
            raise ValueError(f"unknown vendor {self.vendor!r}; choose intel or amd")
        if self.capacity is None:
            return dict(DEFAULT_CAPACITY[self.vendor])
        allowed = VENDOR_RESOURCES[self.vendor]
        capacity = {canonical_resource(k): v for k, v in self.capacity.items()}
        wrong = sorted(set(capacity) - set(allowed))
        if wrong:
            raise ValueError(
                f"{self.vendor} hosts have misc resources {', '.join(allowed)}, not {', '.join(wrong)}: "
                f"use --vendor {'amd' if self.vendor == 'intel' else 'intel'} or drop those capacities"
            )
        return capacity


class Node:
    """One host: the misc controller (``None`` without one) and the static files around it."""

    def __init__(self, spec: NodeSpec | None = None):
        self.spec = spec or NodeSpec()
        capacity = self.spec.resolved_capacity()
        self.misc: MiscController | None = (
            MiscController(capacity, self.spec.profile) if self.spec.profile.has_misc else None
        )
        self._static = self._render_static(capacity)

    @property
    def name(self) -> str:
        return self.spec.name

    def _render_static(self, capacity: Mapping[str, int]) -> dict[str, str]:
        spec = self.spec
        cpu = _CPU[spec.vendor]
        processors = "\n".join(
            f"processor\t: {n}\nvendor_id\t: {cpu['vendor_id']}\nmodel name\t: {cpu['model name']}\n"
            f"flags\t\t: {cpu['flags']}\n"
            for n in range(spec.cpus)
        )
        files = {
            "proc/cpuinfo": processors + "\n",
            "proc/cmdline": _CMDLINE[spec.vendor] + "\n",
            "proc/sys/kernel/osrelease": spec.profile.release + "\n",
            "etc/hostname": spec.name + "\n",
            f"{CGROUP_ROOT}/cgroup.controllers": " ".join(spec.profile.controllers) + "\n",
            "dev/kvm": "",
            "dev/vhost-vsock": "",
            "sys/power/state": _POWER_STATE[spec.vendor] + "\n",
            "sys/kernel/security/lockdown": "[none] integrity confidentiality\n",
        }
        for group in range(IOMMU_GROUPS):
            files[f"sys/kernel/iommu_groups/{group}/type"] = "DMA-FQ\n"
        if spec.vendor == "intel":
            files["sys/module/kvm_intel/parameters/tdx"] = "Y\n" if capacity.get("tdx") else "N\n"
        else:
            files["dev/sev"] = ""
            files["sys/module/kvm_amd/parameters/sev"] = "Y\n" if capacity.get("sev") else "N\n"
            enabled = "Y\n" if capacity.get("sev_es") else "N\n"
            files["sys/module/kvm_amd/parameters/sev_es"] = enabled
            files["sys/module/kvm_amd/parameters/sev_snp"] = enabled
        return files

    def static_files(self) -> dict[str, str]:
        """Everything but the misc files (they never change during a run)."""
        return dict(self._static)

    def misc_files(self) -> dict[str, str]:
        """The misc files only, keyed by host-relative path (they change as guests come and go)."""
        if self.misc is None:
            return {}
        return {f"{CGROUP_ROOT}/{path}": text for path, text in self.misc.render().items()}

    def files(self) -> dict[str, str]:
        """The whole tree, keyed by path relative to the host root."""
        return {**self._static, **self.misc_files()}
