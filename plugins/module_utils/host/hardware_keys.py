# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""TEE key counts as the hardware reports them: a fallback where the kernel does not count, and a cross-check.

Pure Python, standard library only; every read goes through :meth:`host_reader.HostReader.read_at`
(bounded, non-blocking, one register per read).

Layouts, as the kernel uses them (verified in the kernel sources named here):

* **TDX: MSR 0x87 ``IA32_MKTME_KEYID_PARTITIONING``.** ``arch/x86/virt/vmx/tdx/tdx.c``
  ``record_keyid_partitioning()`` reads it with ``rdmsr``: bits 31:0 are the number of MKTME KeyIDs, bits
  63:32 the number of TDX private KeyIDs, and TDX KeyIDs start right after the last MKTME KeyID.
  ``tdx_init()`` then takes the first TDX KeyID as the TDX module's global KeyID, so guests get
  ``nr_tdx_keyids - 1`` keys: exactly the ``tdx`` misc capacity that KVM sets later
  (``misc_cg_set_capacity(MISC_CG_RES_TDX, tdx_get_nr_guest_keyids())`` in ``arch/x86/kvm/vmx/tdx.c``).
* **The msr device.** ``arch/x86/kernel/msr.c`` ``msr_read()``: the file position is the MSR number, a read
  returns 8 bytes, the low 32 bits (EAX) first; in little-endian order that is the 64-bit value. Opening it
  needs the ``msr`` module and ``CAP_SYS_RAWIO`` (root); an MSR the CPU lacks (in most VMs) fails with EIO.
* **SEV: CPUID ``0x8000001F``.** ``arch/x86/kvm/svm/sev.c`` ``sev_hardware_setup()``: EAX bit 1 SEV, bit 3
  SEV-ES, bit 4 SEV-SNP (``X86_FEATURE_SEV``/``SEV_ES``/``SEV_SNP``, word 19 of ``cpufeatures.h``);
  EBX[5:0] the C-bit position; ECX the maximum ASID (number of encrypted guests supported simultaneously);
  EDX the minimum ASID of an SEV (not SEV-ES) guest. ASIDs ``1 .. EDX-1`` are for SEV-ES and SEV-SNP
  guests, so KVM sets the misc capacity ``sev = ECX - EDX + 1`` (only when ``EDX <= ECX``: the BIOS may give
  every ASID to SEV-ES) and ``sev_es = EDX - 1`` (only when ``EDX > 1`` and SEV-ES is enabled in KVM).
* **The cpuid device.** ``arch/x86/kernel/cpuid.c`` ``cpuid_read()``: the file position holds the leaf in its
  low and the subleaf in its high 32 bits, and each 16-byte chunk is EAX, EBX, ECX, EDX (little-endian u32).

Nothing here raises on a bad host: an unreadable register is a fact with the reason (``problem``), and its
numbers are ``None``.
"""

from __future__ import annotations

import struct

MSR_IA32_MKTME_KEYID_PARTITIONING = 0x87
CPUID_SEV_LEAF = 0x8000001F
KERNEL_TDX_MISC_SINCE = (6, 16)

_SEV_FEATURE_BITS = (("sme", 0), ("sev", 1), ("sev_es", 3), ("sev_snp", 4))


def parse_keyid_partitioning(raw: bytes) -> dict:
    """The MSR 0x87 value (8 bytes as the msr device returns them) split as the kernel splits it."""
    value = int.from_bytes(raw, "little")
    mktme, tdx = value & 0xFFFFFFFF, value >> 32
    return {
        "raw": "%#018x" % value,
        "mktme_keyids": mktme,
        "tdx_keyids": tdx,
        # One TDX KeyID is the TDX module's global KeyID; with fewer than two the kernel does not enable TDX.
        "tdx_guest_keyids": tdx - 1 if tdx > 1 else 0,
        "tdx_keyid_range": [mktme + 1, mktme + tdx] if tdx else None,
    }


def expected_asid_capacity(max_asid: int, min_sev_asid: int) -> dict:
    """The ``sev`` and ``sev_es`` misc capacities KVM derives from CPUID ECX and EDX (when enabled)."""
    if not max_asid:
        return {"sev": 0, "sev_es": 0}
    return {
        "sev": max_asid - min_sev_asid + 1 if min_sev_asid <= max_asid else 0,
        "sev_es": min_sev_asid - 1 if min_sev_asid > 1 else 0,
    }


def parse_sev_cpuid(raw: bytes) -> dict:
    """CPUID ``0x8000001F`` (16 bytes as the cpuid device returns them): features and the ASID split."""
    eax, ebx, ecx, edx = struct.unpack("<4I", raw)
    return {
        "raw": {"eax": "%#010x" % eax, "ebx": "%#010x" % ebx, "ecx": "%#010x" % ecx, "edx": "%#010x" % edx},
        "features": {name: bool(eax >> bit & 1) for name, bit in _SEV_FEATURE_BITS},
        "c_bit": ebx & 0x3F,
        "max_asid": ecx,
        "min_sev_asid": edx,
        "expected_capacity": expected_asid_capacity(ecx, edx),
    }


def _cpu_dirs(reader) -> list[str]:
    """``dev/cpu/<n>`` directories, CPU 0 first (the registers read here are the same on every CPU)."""
    entries = reader.listdir("dev/cpu") or []
    return ["dev/cpu/%s" % name for name in sorted((e for e in entries if e.isdigit()), key=int)]


def _read_register(reader, device: str, offset: int, size: int, missing: str) -> tuple[bytes | None, dict]:
    """``(bytes or None, {"path", "problem"})`` from the first CPU whose ``device`` file exists."""
    for cpu in _cpu_dirs(reader):
        rel = "%s/%s" % (cpu, device)
        read = reader.read_at(rel, offset, size, record=False)
        if not read.exists:
            continue
        where = {"path": read.path, "problem": read.problem.problem if read.problem else None}
        return read.data, where
    return None, {"path": reader.path("dev/cpu/0/%s" % device), "problem": missing}


def read_tdx_keyids(reader) -> dict:
    """MSR 0x87 through ``/dev/cpu/<n>/msr``: ``readable``, ``path``, ``problem`` and the parsed counts."""
    data, where = _read_register(
        reader,
        "msr",
        MSR_IA32_MKTME_KEYID_PARTITIONING,
        8,
        "no /dev/cpu/<n>/msr: the msr driver is not loaded (`modprobe msr`)",
    )
    if data is None and (where["problem"] or "").startswith("read at offset"):
        where["problem"] += " (the CPU does not implement MSR 0x87: no TME-MT/TDX, or a virtual machine)"
    result = {"source": "MSR 0x87 IA32_MKTME_KEYID_PARTITIONING", "readable": data is not None, **where}
    if data is not None:
        result.update(parse_keyid_partitioning(data))
    else:
        result.update(dict.fromkeys(("raw", "mktme_keyids", "tdx_keyids", "tdx_guest_keyids", "tdx_keyid_range")))
    return result


def read_sev_asids(reader) -> dict:
    """CPUID 0x8000001F through ``/dev/cpu/<n>/cpuid``: ``readable``, ``path``, ``problem`` and the split."""
    data, where = _read_register(
        reader, "cpuid", CPUID_SEV_LEAF, 16, "no /dev/cpu/<n>/cpuid: the cpuid driver is not loaded (`modprobe cpuid`)"
    )
    result = {"source": "CPUID 0x8000001F", "readable": data is not None, **where}
    if data is not None:
        result.update(parse_sev_cpuid(data))
    else:
        result.update(dict.fromkeys(("raw", "features", "c_bit", "max_asid", "min_sev_asid", "expected_capacity")))
    return result


def cross_check_asids(cpuid: dict, resources: dict, kvm_amd: dict) -> dict:
    """Compare the ASID split from CPUID with the ``sev``/``sev_es`` misc capacity the kernel reports.

    ``resources`` is the capacity report's ``resources`` (``capacity`` per name, ``None`` when unknown),
    ``kvm_amd`` the ``kvm.amd`` host fact: KVM only sets a capacity for what it enabled.
    """
    expected = cpuid.get("expected_capacity")
    if not expected:
        return {"agrees": None, "compared": {}, "mismatches": []}
    compared, mismatches = {}, []
    for name in ("sev", "sev_es"):
        kernel = (resources.get(name) or {}).get("capacity")
        hardware = expected[name]
        if kvm_amd.get(name) is False:
            hardware = 0  # KVM leaves the capacity unset for what it did not enable
        compared[name] = {"cpuid": expected[name], "expected": hardware, "misc_capacity": kernel}
        if kernel is not None and kernel != hardware:
            mismatches.append(name)
    known = all(entry["misc_capacity"] is not None for entry in compared.values())
    return {"agrees": not mismatches if (known or mismatches) else None, "compared": compared, "mismatches": mismatches}


def kernel_counts_tdx(kernel: dict, capacity: dict) -> tuple[bool | None, str]:
    """Whether this kernel's misc cgroup has a ``tdx`` resource at all, with the reason.

    The kernel prints no line for a resource of capacity 0, so an absent ``tdx`` line means either "TDX not
    initialised" (6.16+) or "no such resource" (older kernels without a vendor backport).
    """
    controller = capacity.get("misc_controller") or {}
    if controller.get("not_root_cgroup"):
        return None, controller["reason"]  # the kernel may well count them: this reader cannot see the root
    if not controller.get("present"):
        return False, "no misc cgroup controller: %s" % (controller.get("reason") or "not found")
    entry = (capacity.get("resources") or {}).get("tdx") or {}
    if entry.get("capacity"):
        return True, "misc.capacity lists tdx"
    version = kernel.get("version")
    if version is None:
        return None, "misc.capacity has no tdx line and the kernel version is unknown"
    if tuple(version[:2]) >= KERNEL_TDX_MISC_SINCE:
        return True, "kernel %s has the tdx misc resource (6.16+); its capacity is 0" % kernel.get("release")
    return False, (
        "kernel %s predates the tdx misc resource (6.16) and misc.capacity has no tdx line: TDX keys are not "
        "counted by this kernel" % kernel.get("release")
    )


def gather_hardware_keys(reader, facts: dict, capacity: dict) -> dict:
    """The registers a preflight needs on this host, read only where they answer a question.

    TDX: MSR 0x87 on Intel hosts whose misc cgroup gives no TDX capacity (fallback, and to tell "no keys in
    the BIOS" from "TDX not initialised"). SEV: CPUID 0x8000001F on AMD hosts (ASID split cross-check).
    """
    vendor = facts.get("tee_vendor")
    result = {"tdx": None, "sev": None, "tdx_misc_resource": None, "tdx_misc_reason": None}
    if vendor == "intel":
        counts, why = kernel_counts_tdx(facts.get("kernel") or {}, capacity)
        result["tdx_misc_resource"], result["tdx_misc_reason"] = counts, why
        tdx_capacity = ((capacity.get("resources") or {}).get("tdx") or {}).get("capacity")
        if not tdx_capacity:
            result["tdx"] = read_tdx_keyids(reader)
    elif vendor == "amd":
        cpuid = read_sev_asids(reader)
        cpuid["cross_check"] = cross_check_asids(cpuid, capacity.get("resources") or {}, facts["kvm"]["amd"])
        result["sev"] = cpuid
    return result
