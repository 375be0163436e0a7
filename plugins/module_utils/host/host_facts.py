# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""What a host can do for confidential computing, read from its files: the ``tee_host_info`` facts.

Pure Python, standard library only: the ``tee_host_info`` module (through AnsiballZ),
``scripts/gpu_probe.sh`` and tests use this same file. Files are read through :mod:`host_reader` (bounded,
regular files only, symbolic links resolved inside ``host_root``), the command line is interpreted by
:mod:`cmdline` (the kernel's own tokenizer and handlers), GPUs by :mod:`gpu_facts`, and every readiness
rule lives in :mod:`readiness`.

Kernel facts this reads:

* ``/proc/cpuinfo`` flags on *every* processor (a TEE needs all of them), ``vendor_id``.
* ``/sys/module/kvm_intel/parameters/tdx`` and ``/sys/module/kvm_amd/parameters/{sev,sev_es,sev_snp}``:
  bool parameters print ``Y``/``N``; older ``kvm_amd.sev`` was an int printing ``1``/``0``.
  ``kvm_amd/parameters/ciphertext_hiding_asids`` (6.18+) is a uint: the SNP share of the SEV-ES/SNP ASIDs
  (:mod:`sev_asids`).
* ``/sys/kernel/iommu_groups/*/type``: the domain type each group really uses (``identity`` is
  passthrough, ``DMA``/``DMA-FQ`` translated).
* ``/sys/power/state``: ``disk`` is listed only while hibernation is available.
* ``/sys/kernel/security/lockdown``: the active lockdown level in brackets.

Nothing here raises on bad input: absent hardware is a fact (``False``/``None``) and an unreadable or
malformed file is a fact plus an entry in ``warnings`` naming the path.
"""

from __future__ import annotations

import os
import re
from collections import Counter

from ansible_collections.confidential.tee.plugins.module_utils.common.errors import TeeError
from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import HostReader, Problem
from ansible_collections.confidential.tee.plugins.module_utils.common.tee import QGS_SOCKET
from ansible_collections.confidential.tee.plugins.module_utils.common.validation import as_text
from ansible_collections.confidential.tee.plugins.module_utils.host.cmdline import cmdline_facts
from ansible_collections.confidential.tee.plugins.module_utils.host.gpu_unprobed import empty_gpu
from ansible_collections.confidential.tee.plugins.module_utils.host.readiness import (
    boot_verdict,
    summarize_iommu,
    summarize_sev,
    summarize_sgx,
    summarize_tdx,
    tee_vendor,
)
from ansible_collections.confidential.tee.plugins.module_utils.host.sev_asids import (
    read_ciphertext_hiding,
    sev_asid_split,
)

# cpuinfo of a 512-CPU host is about 1 MiB; anything far larger is not a cpuinfo.
MAX_FILE_BYTES = 8 * 1024 * 1024
SMALL_FILE_BYTES = 64 * 1024

CPUINFO = "proc/cpuinfo"
CMDLINE = "proc/cmdline"
OSRELEASE = "proc/sys/kernel/osrelease"
PROC_VERSION = "proc/version"
KVM_INTEL_DIR = "sys/module/kvm_intel"
KVM_AMD_DIR = "sys/module/kvm_amd"
IOMMU_GROUPS = "sys/kernel/iommu_groups"
POWER_STATE = "sys/power/state"
LOCKDOWN = "sys/kernel/security/lockdown"
DEV_SEV = "dev/sev"
DEV_SGX_ENCLAVE = "dev/sgx_enclave"
DEV_SGX_PROVISION = "dev/sgx_provision"
DEV_VHOST_VSOCK = "dev/vhost-vsock"
DEV_VSOCK = "dev/vsock"
PCI_DEVICES = "sys/bus/pci/devices"
SYS_MODULE = "sys/module"
# Kernel modules whose presence matters to a TEE node (/sys/module/<name> exists while one is loaded or built in).
WATCHED_MODULES = (
    "kvm",
    "kvm_intel",
    "kvm_amd",
    "ccp",
    "vhost_vsock",
    "vsock_loopback",
    "vfio",
    "vfio_pci",
    "vfio_iommu_type1",
    "nvidia",
    "nvidia_uvm",
    "nouveau",
)

CPU_FLAGS = ("tdx_host_platform", "sev", "sev_es", "sev_snp", "sgx", "sgx_lc", "hypervisor", "tdx_guest")
KVM_AMD_PARAMS = ("sev", "sev_es", "sev_snp")

_KERNEL_VERSION_RE = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?")
_PROC_VERSION_RE = re.compile(r"^\s*Linux version (\S+)")
_LOCKDOWN_RE = re.compile(r"\[(\w+)\]")


class HostRootError(TeeError):
    """``host_root`` is not a directory: nothing can be read, which is a usage error, not a fact."""


# ---------------------------------------------------------------------------------------------------
# Pure parsers of file contents
# ---------------------------------------------------------------------------------------------------


def parse_cpuinfo(data):
    """Flags present on *every* processor (a TEE needs all CPUs), vendor and model.

    Returns ``{"flags": set | None, "vendor": str | None, "model_name": str | None,
    "processors": int, "flags_consistent": bool}``; ``flags`` is ``None`` when no ``flags`` line exists.
    """
    flags = None
    consistent = True
    first = {"vendor_id": None, "model name": None}
    processors = 0
    last_flags_text = None
    for line in as_text(data).splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key = key.strip()
        if key == "processor":
            processors += 1
        elif key in first and first[key] is None:
            first[key] = value.strip() or None
        elif key == "flags" and value != last_flags_text:
            # Hundreds of CPUs usually print the same line: skip re-splitting identical text.
            last_flags_text = value
            these = set(value.split())
            if flags is not None and these != flags:
                consistent = False
            flags = these if flags is None else flags & these
    return {
        "flags": flags,
        "vendor": first["vendor_id"],
        "model_name": first["model name"],
        "processors": processors,
        "flags_consistent": consistent,
    }


def parse_sysfs_bool(data):
    """A module parameter file: ``(True|False|None, problem|None)``."""
    value = as_text(data).strip()
    if value in ("Y", "y", "1"):
        return True, None
    if value in ("N", "n", "0"):
        return False, None
    shown = value if len(value) <= 40 else value[:40] + "..."
    return None, "unexpected value %r (expected Y, N, 1 or 0)" % shown


def parse_kernel_release(data):
    """``(release, [major, minor, patch] | None)`` from ``/proc/sys/kernel/osrelease``."""
    lines = as_text(data).strip().splitlines()
    release = lines[0].strip() if lines else ""
    if not release or any(ord(char) < 32 or char == "\ufffd" for char in release):
        return None, None
    match = _KERNEL_VERSION_RE.match(release)
    if not match:
        return release, None
    return release, [int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)]


def parse_proc_version(data):
    """The release from ``/proc/version`` (``Linux version 6.8.0-48-generic (...) ...``)."""
    match = _PROC_VERSION_RE.match(as_text(data))
    if not match:
        return None, None
    return parse_kernel_release(match.group(1))


# ---------------------------------------------------------------------------------------------------
# Reading a host tree
# ---------------------------------------------------------------------------------------------------


def _read(reader, rel, expected=False, limit=SMALL_FILE_BYTES, truncate=False):
    return reader.read(rel, expected=expected, limit=limit, truncate=truncate).text()


def read_kernel(reader):
    release, version, source = None, None, None
    text = _read(reader, OSRELEASE)
    if text is not None:
        release, version = parse_kernel_release(text)
        if release is None:
            reader.note(reader.path(OSRELEASE), "no kernel release in it")
        else:
            source = reader.path(OSRELEASE)
    if release is None:
        text = _read(reader, PROC_VERSION, expected=True)
        if text is not None:
            release, version = parse_proc_version(text)
            if release is None:
                reader.note(reader.path(PROC_VERSION), "no 'Linux version <release>' at its start")
            else:
                source = reader.path(PROC_VERSION)
    return {"release": release, "version": version, "source": source}


def read_cpu(reader):
    result = reader.read(CPUINFO, expected=True, limit=MAX_FILE_BYTES, truncate=True)
    text = result.text()
    parsed = parse_cpuinfo(text) if text is not None else None
    if parsed and b"\x00" in (result.data or b""):
        reader.note(result.path, "contains NUL bytes: not a text file as the kernel writes it")
    flags = parsed["flags"] if parsed else None
    if parsed and flags is None:
        reader.note(result.path, "no 'flags' line: CPU features are unknown")
    if parsed and not parsed["flags_consistent"]:
        reader.note(result.path, "processors report different flags: only common flags count")
    cpu = {
        "readable": text is not None,
        "vendor": parsed["vendor"] if parsed else None,
        "model_name": parsed["model_name"] if parsed else None,
        "processors": parsed["processors"] if parsed else None,
        "flags": {name: (None if flags is None else name in flags) for name in CPU_FLAGS},
    }
    cpu["tee_vendor"] = tee_vendor(cpu)
    return cpu


def _read_param(reader, module_dir, name):
    rel = "%s/parameters/%s" % (module_dir, name)
    text = _read(reader, rel)
    if text is None:
        return None
    value, problem = parse_sysfs_bool(text)
    if problem:
        reader.note(reader.path(rel), problem)
    return value


def read_kvm(reader):
    intel_loaded = reader.isdir(KVM_INTEL_DIR)
    amd_loaded = reader.isdir(KVM_AMD_DIR)
    intel = {"loaded": intel_loaded, "tdx": _read_param(reader, KVM_INTEL_DIR, "tdx") if intel_loaded else None}
    amd = {"loaded": amd_loaded}
    for name in KVM_AMD_PARAMS:
        amd[name] = _read_param(reader, KVM_AMD_DIR, name) if amd_loaded else None
    # Not a bool: the number of SNP ASIDs when ciphertext hiding splits the SEV-ES/SNP range (sev_asids.py).
    amd["ciphertext_hiding"] = read_ciphertext_hiding(reader, amd_loaded)
    return {"intel": intel, "amd": amd}


def read_cmdline(reader):
    result = reader.read(CMDLINE, expected=True)
    # Bytes as the kernel has them: Latin-1 maps each byte to one character, so token boundaries are exact.
    text = None if result.data is None else result.data.decode("latin-1")
    return cmdline_facts(text, source="/" + CMDLINE)


def read_iommu(reader, cmdline):
    entries = reader.listdir(IOMMU_GROUPS)
    groups = None if entries is None else [name for name in entries if name.isdigit()]
    types = Counter()
    for group in groups or []:
        text = _read(reader, "%s/%s/type" % (IOMMU_GROUPS, group))
        if text is not None:
            types[text.strip() or None] += 1
    default = types.most_common(1)[0][0] if types else None
    return {
        "groups": None if groups is None else len(groups),
        "enabled": None if groups is None else len(groups) > 0,
        "group_types": dict(types),
        "default_domain": default,
        "cmdline_intel_iommu_on": cmdline["intel_iommu_on"],
        "cmdline_iommu_pt": cmdline["iommu_pt"],
        "cmdline_iommu_off": cmdline["iommu_off"],
    }


def read_pci(reader):
    """PCI functions from sysfs: address, vendor, device, class, bound driver and IOMMU group."""
    names = reader.listdir(PCI_DEVICES)
    devices = []
    for bdf in names or []:
        base = "%s/%s" % (PCI_DEVICES, bdf)
        values = {
            key: (_read(reader, "%s/%s" % (base, key)) or "").strip() or None for key in ("vendor", "device", "class")
        }
        devices.append(
            {
                "bdf": bdf,
                "vendor": values["vendor"],
                "device": values["device"],
                # class is 0xCCSSPP: base class and subclass say what the function is.
                "class": values["class"][:6] if values["class"] else None,
                "driver": reader.link_name(base + "/driver"),
                "iommu_group": reader.link_name(base + "/iommu_group"),
            }
        )
    return {"readable": names is not None, "devices": devices}


def read_power(reader):
    """Hibernation availability as the running kernel reports it, and the lockdown level."""
    state = _read(reader, POWER_STATE)
    lockdown_text = _read(reader, LOCKDOWN)
    lockdown = _LOCKDOWN_RE.search(lockdown_text or "")
    return {
        "states": None if state is None else state.split(),
        "hibernation_available": None if state is None else "disk" in state.split(),
        "lockdown": lockdown.group(1) if lockdown else None,
    }


def read_qgs(reader, path=QGS_SOCKET):
    """The Quote Generation Service socket at ``path`` (a host path; KubeVirt's qgsSocketPath may move it)."""
    result = reader.stat(path)
    return {
        "path": path,
        "present": None if result is None else result is not False,
        "is_socket": None if result is None else bool(reader.is_socket(path)),
    }


def read_modules(reader):
    """Which of :data:`WATCHED_MODULES` are loaded (``None`` where it cannot be told)."""
    return {name: reader.isdir("%s/%s" % (SYS_MODULE, name)) for name in WATCHED_MODULES}


def read_devices(reader):
    return {
        "sev": reader.exists(DEV_SEV),
        "sgx_enclave": reader.exists(DEV_SGX_ENCLAVE),
        "sgx_provision": reader.exists(DEV_SGX_PROVISION),
        "vhost_vsock": reader.exists(DEV_VHOST_VSOCK),
        "vsock": reader.exists(DEV_VSOCK),
    }


# ---------------------------------------------------------------------------------------------------
# Everything together
# ---------------------------------------------------------------------------------------------------


def gather_host_facts(reader: HostReader, gpu=None, qgs_socket=QGS_SOCKET):
    """All facts of the host ``reader`` reads.

    ``gpu`` is a ``(gpu_fact, warnings)`` pair from :func:`gpu_facts.probe_gpu` (or ``None``: not probed);
    ``qgs_socket`` is where the Quote Generation Service socket is expected. The facts' ``warnings`` are the
    host's problems found so far. Raises :class:`HostRootError` only when the host's root is not a directory.
    """
    host_root = reader.host_root
    if not os.path.isdir(host_root):
        raise HostRootError(
            "host_root %r is not a directory: point it at the host's root (/ or the DaemonSet's "
            "host mount such as /host, or a simulated node tree)" % host_root
        )
    kernel, cpu, kvm, cmdline = read_kernel(reader), read_cpu(reader), read_kvm(reader), read_cmdline(reader)
    devices, qgs, power = read_devices(reader), read_qgs(reader, qgs_socket), read_power(reader)
    iommu = read_iommu(reader, cmdline)
    facts = {
        "host_root": host_root,
        "tee_vendor": cpu["tee_vendor"],
        "kernel": kernel,
        "cpu": cpu,
        "kvm": kvm,
        "cmdline": cmdline,
        "devices": devices,
        "iommu": dict(iommu, **summarize_iommu(iommu, cmdline, cpu["tee_vendor"])),
        "power": power,
        "vsock": {"vhost_vsock": devices["vhost_vsock"], "vsock": devices["vsock"]},
        "qgs": qgs,
        "pci": read_pci(reader),
        "modules": read_modules(reader),
        "tdx": summarize_tdx(cpu, kvm, cmdline, kernel, qgs, power),
        "sgx": summarize_sgx(cpu, devices),
    }
    facts.update(summarize_sev(cpu, kvm, cmdline, kernel, devices, iommu))
    # The joint count needs misc.capacity: tee_host_info completes it when it reads the capacity.
    facts["sev_asids"] = sev_asid_split(kvm["amd"])
    facts["boot"] = boot_verdict(facts)
    warnings = [problem.as_dict() for problem in reader.problems]
    if gpu is None:
        facts["gpu"] = empty_gpu()
    else:
        facts["gpu"], gpu_warnings = gpu
        warnings += [Problem(w["path"], w["problem"]).as_dict() for w in gpu_warnings]
    # The one name of a problem list; "warnings" is the same list, deprecated (returned until release 0.3.0).
    facts["problems"] = facts["warnings"] = warnings
    return facts
