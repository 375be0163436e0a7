"""A whole simulated host: the files a TEE node exposes under ``/``, rendered from the kernel model.

Models what the collection's modules and the device plugins read on a real node:

* ``sys/fs/cgroup/cgroup.controllers`` and the misc files of every cgroup (from :class:`teesim.kernel.kvm.KvmKeys`,
  a misc controller whose charges fail as KVM's launches do),
* ``sys/module/kvm_intel/parameters/tdx`` or ``sys/module/kvm_amd/parameters/{sev,sev_es,sev_snp}``,
* ``proc/cpuinfo`` (one processor per CPU, with the TEE flags), ``proc/cmdline``,
  ``proc/sys/kernel/osrelease``, ``etc/hostname``,
* what the host roles and ``dcap_config`` read of a Debian 12 system: ``etc/os-release``, ``etc/default/grub``
  (the kernel command line above, as Debian's GRUB would give it), ``etc/passwd`` and ``etc/group`` (with the
  ``kvm`` group and QEMU's uid/gid 107 that KubeVirt's virt-launcher uses),
* device nodes ``dev/kvm``, ``dev/vhost-vsock`` and, on AMD, ``dev/sev`` as plain (empty) files,
* ``sys/kernel/iommu_groups/<n>/type`` (translated ``DMA-FQ`` domains, as with the IOMMU on and no
  ``iommu=pt``), ``sys/power/state`` (``disk`` only where the command line leaves hibernation available)
  and ``sys/kernel/security/lockdown``.

Optional extras (:class:`NodeSpec` fields; off by default, so plain trees stay as they were):

* ``registers``: ``dev/cpu/0/msr`` holding MSR 0x87 (IA32_MKTME_KEYID_PARTITIONING: MKTME KeyIDs in bits
  31:0, TDX KeyIDs in 63:32, TDX KeyIDs = ``tdx`` capacity + 1 for the TDX module's global KeyID) on Intel,
  and ``dev/cpu/0/cpuid`` holding leaf 0x8000001F (ECX max ASID = ``sev`` + ``sev_es``, EDX min SEV ASID =
  ``sev_es`` + 1) on AMD, at the offsets the kernel's msr and cpuid drivers use (sparse files);
* ``tdx_misc=False``: a kernel whose KVM has TDX (a vendor backport) but no ``tdx`` misc resource;
* ``ciphertext_hiding_asids``: the ``kvm_amd`` parameter (AMD ciphertext hiding, 6.18+) that splits the
  ``sev_es`` ASIDs into an SNP range and an SEV-ES range (:mod:`teesim.kernel.asids`);
* ``kvm_tdx``: the ``kvm_intel`` ``tdx`` parameter (``auto``: Y when there are TDX keys; ``absent``: a
  kernel without KVM TDX has no such parameter);
* ``pci``: PCI devices under ``sys/bus/pci/devices/<bdf>`` with ``vendor``, ``device``, ``class`` and the
  ``driver`` and ``iommu_group`` links.

Simplifications: files are static text except the misc files; device nodes are regular files; only one
CPU model per vendor; no firmware tables; IOMMU groups have no devices; registers only for CPU 0;
``sys/bus/pci/devices/<bdf>`` are directories, not links into ``sys/devices``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from teesim._collection import VENDOR_MISC_RESOURCES, canonical_resource, tee_registry
from teesim.kernel.kvm import KvmKeys
from teesim.kernel.profiles import CURRENT, KernelProfile
from teesim.kernel.tee_hosts import HostProfile, host_profile

CGROUP_ROOT = "sys/fs/cgroup"
VENDOR_RESOURCES: dict[str, tuple[str, ...]] = dict(VENDOR_MISC_RESOURCES)
# The first TEE of the registry (TDX): what a node is unless told otherwise.
DEFAULT_VENDOR: str = tee_registry.VENDORS[0]
IOMMU_GROUPS = 4
# A Debian 12 host's files the host roles read (os-release from base-files 12, passwd/group from base-passwd, plus
# the kvm group and uid/gid 107, the QEMU user of KubeVirt's virt-launcher).
_OS_FILES: dict[str, str] = {
    "etc/os-release": (
        'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nNAME="Debian GNU/Linux"\nVERSION_ID="12"\n'
        'VERSION="12 (bookworm)"\nVERSION_CODENAME=bookworm\nID=debian\n'
    ),
    "etc/passwd": (
        "root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n"
        "qemu:x:107:107:qemu:/nonexistent:/usr/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
    ),
    "etc/group": "root:x:0:\ndaemon:x:1:\nkvm:x:993:qemu\nqemu:x:107:\nnogroup:x:65534:\n",
}


def _default_grub(cmdline: str) -> str:
    """Debian's /etc/default/grub whose GRUB_CMDLINE_LINUX_DEFAULT gives ``cmdline``'s arguments after ``ro``."""
    arguments = cmdline.split(" ro ", 1)[-1]
    return (
        "# If you change this file, run 'update-grub' afterwards to update\n# /boot/grub/grub.cfg.\n"
        "GRUB_DEFAULT=0\nGRUB_TIMEOUT=5\nGRUB_DISTRIBUTOR=Debian\n"
        f'GRUB_CMDLINE_LINUX_DEFAULT="{arguments}"\nGRUB_CMDLINE_LINUX=""\n'
    )


def parse_assignments(items: list[str] | None, what: str) -> dict[str, int]:
    """Parse ``["tdx=63", "snp=10"]`` into ``{"tdx": 63, "sev_es": 10}`` with clear errors."""
    result: dict[str, int] = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not name or not value.isdigit():
            raise ValueError(f"{what} {item!r}: expected RESOURCE=COUNT, e.g. tdx=63")
        result[canonical_resource(name.strip())] = int(value)
    return result


KVM_TDX_CHOICES = ("auto", "Y", "N", "absent")


@dataclass(frozen=True)
class PciDevice:
    """One PCI function: ``vendor``/``device``/``pci_class`` as sysfs prints them, its driver and IOMMU group."""

    bdf: str
    vendor: str
    device: str
    pci_class: str
    driver: str | None = None
    iommu_group: int | None = None


@dataclass(frozen=True)
class NodeSpec:
    """What a simulated host is: name, kernel profile, CPU vendor, capacity, CPUs, and the optional extras."""

    name: str = "node-1"
    profile: KernelProfile = CURRENT
    vendor: str = DEFAULT_VENDOR
    capacity: Mapping[str, int] | None = None
    cpus: int = 4
    registers: bool = False
    mktme_keyids: int = 31
    tdx_misc: bool = True
    kvm_tdx: str = "auto"
    pci: tuple[PciDevice, ...] = ()
    # kvm_amd.ciphertext_hiding_asids (Linux 6.18+, sev.c): None = a kernel without the parameter, 0 = off,
    # N = SNP ASIDs 1..N and SEV-ES ASIDs N+1..sev_es (KVM caps N at the joint range and prints what it kept).
    ciphertext_hiding_asids: int | None = None

    def host(self) -> HostProfile:
        """The simulated host of this vendor's TEE (``teesim.kernel.tee_hosts``)."""
        return host_profile(self.vendor)

    def resolved_capacity(self) -> dict[str, int]:
        host = self.host()
        if self.capacity is None:
            return dict(host.capacity)
        allowed = VENDOR_RESOURCES[self.vendor]
        capacity = {canonical_resource(k): v for k, v in self.capacity.items()}
        wrong = sorted(set(capacity) - set(allowed))
        if wrong:
            others = [v for v, names in VENDOR_RESOURCES.items() if v != self.vendor and set(wrong) <= set(names)]
            raise ValueError(
                f"{self.vendor} hosts have misc resources {', '.join(allowed)}, not {', '.join(wrong)}: "
                f"use --vendor {' or '.join(others) or 'of a host that has them'} or drop those capacities"
            )
        return capacity


class Node:
    """One host: the misc controller (``None`` without one) and the static files around it."""

    def __init__(self, spec: NodeSpec | None = None):
        self.spec = spec or NodeSpec()
        capacity = self.spec.resolved_capacity()
        if self.spec.kvm_tdx not in KVM_TDX_CHOICES:
            raise ValueError(f"kvm_tdx {self.spec.kvm_tdx!r}: choose one of {', '.join(KVM_TDX_CHOICES)}")
        # Without the tdx misc resource the keys still exist in the hardware, but the kernel does not count them.
        counted = capacity if self.spec.tdx_misc else {k: v for k, v in capacity.items() if k != "tdx"}
        # KVM's key allocation around the misc charge: ENOSPC for TDX KeyIDs, the SNP/SEV-ES ASID ranges.
        self.misc: KvmKeys | None = (
            KvmKeys(counted, self.spec.profile, self.spec.ciphertext_hiding_asids)
            if self.spec.profile.has_misc
            else None
        )
        self.hardware_capacity = dict(capacity)
        self._static = self._render_static(capacity)

    @property
    def name(self) -> str:
        return self.spec.name

    def _render_static(self, capacity: Mapping[str, int]) -> dict[str, str]:
        spec = self.spec
        host = spec.host()
        cpu = dict(host.cpu)
        if spec.kvm_tdx == "absent":
            # A kernel without KVM TDX predates the host TDX support that sets this flag.
            cpu["flags"] = cpu["flags"].replace(" tdx_host_platform", "")
        processors = "\n".join(
            f"processor\t: {n}\nvendor_id\t: {cpu['vendor_id']}\nmodel name\t: {cpu['model name']}\n"
            f"flags\t\t: {cpu['flags']}\n"
            for n in range(spec.cpus)
        )
        files = {
            "proc/cpuinfo": processors + "\n",
            "proc/cmdline": host.cmdline + "\n",
            "proc/sys/kernel/osrelease": spec.profile.release + "\n",
            "etc/hostname": spec.name + "\n",
            **_OS_FILES,
            "etc/default/grub": _default_grub(host.cmdline),
            f"{CGROUP_ROOT}/cgroup.controllers": " ".join(spec.profile.controllers) + "\n",
            "dev/kvm": "",
            "dev/vhost-vsock": "",
            "sys/power/state": host.power_state + "\n",
            "sys/kernel/security/lockdown": "[none] integrity confidentiality\n",
        }
        for group in range(IOMMU_GROUPS):
            files[f"sys/kernel/iommu_groups/{group}/type"] = "DMA-FQ\n"
        files.update(host.module_files(spec, capacity))
        for device in spec.pci:
            base = f"sys/bus/pci/devices/{device.bdf}"
            files[f"{base}/vendor"] = device.vendor + "\n"
            files[f"{base}/device"] = device.device + "\n"
            files[f"{base}/class"] = device.pci_class + "\n"
        return files

    def registers(self) -> dict[str, tuple[int, bytes]]:
        """``{relpath: (offset, bytes)}`` of the register files (empty unless ``spec.registers``)."""
        if not self.spec.registers:
            return {}
        return self.spec.host().registers(self.spec, self.hardware_capacity)

    def links(self) -> dict[str, str]:
        """``{relpath: target}`` of the symbolic links (the PCI devices' ``driver`` and ``iommu_group``)."""
        links = {}
        for device in self.spec.pci:
            base = f"sys/bus/pci/devices/{device.bdf}"
            if device.driver:
                links[f"{base}/driver"] = f"../../../../bus/pci/drivers/{device.driver}"
            if device.iommu_group is not None:
                links[f"{base}/iommu_group"] = f"../../../../kernel/iommu_groups/{device.iommu_group}"
        return links

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
