# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""SEV-ES and SEV-SNP ASIDs: one joint range, or two when AMD ciphertext hiding splits it.

Pure Python, standard library only. Checked against Linux ``arch/x86/kvm/svm/sev.c`` as merged for 6.18
("KVM: SEV: Add SEV-SNP CipherTextHiding support", v9 of the series, 2025-08) and unchanged through 7.x:

* ``module_param_named(ciphertext_hiding_asids, nr_ciphertext_hiding_asids, uint, 0444)``: a read-only
  unsigned int, ``0`` by default (ciphertext hiding off); sysfs prints it in decimal. Only numbers are
  accepted: the string ``max`` of the series' v7 draft was dropped in v8, and ``-1`` (``4294967295``) is the
  upstream way to give SNP every joint ASID. Kernels before 6.18 have no such file: no split.
* ``sev_hardware_setup()``: when the firmware supports ciphertext hiding, ``max_snp_asid =
  min(N, MIN_SEV_ASID - 1)``; with SNP initialised the parameter is *written back* with that capped value
  (the firmware leaves it 0 when it cannot hide ciphertext), so the file is the number of SNP ASIDs. A
  non-zero value makes SNP ASIDs ``1..N`` and SEV-ES ASIDs ``N+1..MIN_SEV_ASID-1``; SEV-ES is "unusable"
  when N takes the whole joint range.
* ``misc_cg_set_capacity(MISC_CG_RES_SEV_ES, MIN_SEV_ASID - 1)`` is unchanged: ``misc.capacity`` still
  reports the joint count and ``misc.current sev_es`` charges SEV-ES and SNP guests alike.
* ``sev_asid_new()``: the misc charge comes first (``-EBUSY`` past ``misc.max`` or the capacity), then the
  ASID bitmap of the guest's own range: an SNP guest past ``N`` fails ``-EBUSY`` while ``misc.current``
  shows joint ASIDs free; an SEV-ES guest whose range is empty fails ``-ENOTTY`` (``min_asid > max_asid``).

Nothing here raises on a bad host: an unknown count is ``None`` with the reason in ``reasons``.
"""

from __future__ import annotations

CIPHERTEXT_HIDING_PARAM = "sys/module/kvm_amd/parameters/ciphertext_hiding_asids"
UINT_MAX = 0xFFFFFFFF
KERNEL_CIPHERTEXT_HIDING_SINCE = (6, 18)
UPSTREAM = "Linux arch/x86/kvm/svm/sev.c (6.18+)"


def parse_ciphertext_hiding(text: str | None) -> tuple[int | None, str | None]:
    """The parameter's value as KVM prints it (a decimal uint): ``(asids, problem)``."""
    if text is None:
        return None, None
    value = text.strip()
    if value.isdigit() and value.isascii() and int(value) <= UINT_MAX:
        return int(value), None
    shown = value if len(value) <= 40 else value[:40] + "..."
    if value == "max":
        return None, (
            "value 'max' is not what upstream KVM prints (a decimal unsigned int; 'max' was only in a draft of the "
            "series): this kernel's ciphertext hiding is not the upstream one, so the SNP ASID count is unknown"
        )
    return None, "unexpected value %r (KVM prints a decimal unsigned int)" % shown


def read_ciphertext_hiding(reader, kvm_amd_loaded) -> dict:
    """``{"path", "present", "asids", "problem"}`` of the ``kvm_amd`` parameter (``present`` None: unknown)."""
    path = reader.path(CIPHERTEXT_HIDING_PARAM)
    if not kvm_amd_loaded:
        return {"path": path, "present": None, "asids": None, "problem": None}
    result = reader.read(CIPHERTEXT_HIDING_PARAM, limit=4096)
    if result.exists is False:
        return {"path": path, "present": False, "asids": None, "problem": None}
    if result.problem is not None:  # already recorded by the reader
        return {"path": path, "present": True, "asids": None, "problem": result.problem.problem}
    asids, problem = parse_ciphertext_hiding(result.text())
    if problem:
        reader.note(path, problem)
    return {"path": path, "present": True, "asids": asids, "problem": problem}


def _joint(capacity, cpuid) -> tuple[int | None, str]:
    """The joint SEV-ES/SNP ASID count (MIN_SEV_ASID - 1) and where it was read."""
    entry = ((capacity or {}).get("resources") or {}).get("sev_es") or {}
    if entry.get("capacity") is not None:
        return entry["capacity"], "misc.capacity sev_es"
    if (cpuid or {}).get("readable") and cpuid.get("min_sev_asid") is not None:
        return max(cpuid["min_sev_asid"] - 1, 0), "CPUID 0x8000001F EDX (min SEV ASID) - 1"
    if capacity is None:
        return None, "misc.capacity not read (capacity: true or preflight: true reads it)"
    reasons = entry.get("unknown") or ["misc.capacity has no sev_es line and CPUID 0x8000001F was not read"]
    return None, "; ".join(reasons)


def _pool(capacity, first, last, source, shared) -> dict:
    asid_range = [first, last] if capacity and first is not None else None
    return {"capacity": capacity, "asid_range": asid_range, "source": source, "shared": shared}


def _split_off(joint, joint_source, why) -> dict:
    """No ciphertext hiding: SNP and SEV-ES draw from one joint range 1..MIN_SEV_ASID-1."""
    source = "%s (joint SEV-ES/SNP range: %s)" % (joint_source, why)
    return {
        "snp": _pool(joint, 1, joint, source, True),
        "sev_es": _pool(joint, 1, joint, source, True),
    }


def _split_on(snp_n, snp_enabled, joint, joint_source, param_path) -> tuple[dict, list]:
    reasons = []
    if joint is not None and snp_n > joint:
        # Only possible when SNP did not initialise: KVM then keeps the value as given, uncapped.
        reasons.append("ciphertext_hiding_asids %d exceeds the joint range %d: SNP gets %d" % (snp_n, joint, joint))
    snp_count = min(snp_n, joint) if joint is not None else snp_n
    source = "%s = %d (%s: SNP ASIDs 1..N)" % (param_path, snp_n, UPSTREAM)
    if snp_enabled is False:
        snp = _pool(0, None, None, "kvm_amd sev_snp is N: KVM launches no SNP guest", False)
    else:
        snp = _pool(snp_count, 1, snp_count, source, False)
    if joint is None:
        reasons.append("SEV-ES capacity unknown: %s" % joint_source)
        sev_es = _pool(None, None, None, joint_source, False)
    else:
        es_source = "%s minus ciphertext_hiding_asids (SEV-ES ASIDs N+1..MIN_SEV_ASID-1)" % joint_source
        sev_es = _pool(max(joint - snp_n, 0), snp_n + 1, joint, es_source, False)
    return {"snp": snp, "sev_es": sev_es}, reasons


def sev_asid_split(kvm_amd: dict, capacity: dict | None = None, cpuid: dict | None = None) -> dict:
    """SNP and SEV-ES ASID capacities with their sources, from the ``kvm.amd`` host fact.

    ``capacity`` is the capacity report (``None``: not read), ``cpuid`` the CPUID 0x8000001F read of
    :func:`hardware_keys.read_sev_asids` (``None``: not read). ``ciphertext_hiding`` is ``True``/``False``, or
    ``None`` when it cannot be told; ``snp``/``sev_es`` carry ``capacity`` (``None`` when unknown),
    ``asid_range``, ``source`` and ``shared`` (both kinds draw from the same range).
    """
    param = kvm_amd.get("ciphertext_hiding") or {}
    joint, joint_source = _joint(capacity, cpuid)
    result = {
        "ciphertext_hiding": None,
        "ciphertext_hiding_asids": param.get("asids"),
        "joint": {"capacity": joint, "source": joint_source},
        "reasons": [],
    }
    if not kvm_amd.get("loaded"):
        why = "kvm_amd is not loaded" if kvm_amd.get("loaded") is False else "kvm_amd state unknown"
        return _unknown(result, why)
    if param.get("present") is False:
        result["ciphertext_hiding"] = False
        result.update(_split_off(joint, joint_source, "no ciphertext_hiding_asids parameter (kernel before 6.18)"))
    elif param.get("asids") is None:
        problem = param.get("problem") or "not read"
        return _unknown(result, "%s: %s" % (param.get("path") or CIPHERTEXT_HIDING_PARAM, problem))
    elif param["asids"] == 0:
        result["ciphertext_hiding"] = False
        result.update(_split_off(joint, joint_source, "ciphertext_hiding_asids is 0, ciphertext hiding off"))
    else:
        result["ciphertext_hiding"] = True
        split, reasons = _split_on(param["asids"], kvm_amd.get("sev_snp"), joint, joint_source, param["path"])
        result.update(split)
        result["reasons"] += reasons
    if joint is None:
        result["reasons"].append("joint SEV-ES/SNP ASID count unknown: %s" % joint_source)
    if kvm_amd.get("sev_snp") is False and not result["ciphertext_hiding"]:
        result["snp"] = _pool(0, None, None, "kvm_amd sev_snp is N: KVM launches no SNP guest", False)
    result["reasons"] = list(dict.fromkeys(result["reasons"]))
    result["summary"] = describe(result)
    return result


def _unknown(result: dict, why: str) -> dict:
    """Neither count can be told: both ``None``, with the reason (never a 0 standing in for unknown)."""
    result.update(snp=_pool(None, None, None, None, None), sev_es=_pool(None, None, None, None, None))
    result["reasons"] = [why]
    result["summary"] = describe(result)
    return result


def describe(split: dict) -> str:
    """One sentence an operator can read: what the split means for SNP and SEV-ES guests."""
    snp, es, joint = split["snp"], split["sev_es"], split["joint"]["capacity"]
    if split["ciphertext_hiding"] is None:
        return "SNP/SEV-ES ASID split unknown: %s" % "; ".join(split["reasons"] or ["not read"])
    if not split["ciphertext_hiding"]:
        return "ciphertext hiding off: SEV-ES and SNP guests share %s ASIDs (misc.capacity sev_es counts them all)" % (
            "the joint range of %d" % joint if joint is not None else "one joint range of unknown size"
        )
    text = (
        "ciphertext hiding on: SNP guests get ASIDs 1..%d (%s), SEV-ES guests the rest of the joint range (%s); "
        "misc.capacity sev_es%s still counts both, and misc.current sev_es charges both, so its free count "
        "overstates SNP capacity: an SNP launch past ASID %d fails with EBUSY while keys look free"
        % (
            split["ciphertext_hiding_asids"],
            "%s ASIDs" % snp["capacity"] if snp["capacity"] is not None else "count unknown",
            "%s ASIDs" % es["capacity"] if es["capacity"] is not None else "count unknown",
            " (%d)" % joint if joint is not None else "",
            split["ciphertext_hiding_asids"],
        )
    )
    if es["capacity"] == 0:
        text += "; SEV-ES is unusable: every joint ASID went to SNP, and SEV-ES launches fail with ENOTTY"
    # sev_hardware_setup() logs it (kvm_amd: "SEV-SNP ciphertext hiding enabled", then both ranges).
    return text + " (dmesg: 'SEV-SNP ciphertext hiding enabled' and the SEV-ES and SEV-SNP ASID ranges)"
