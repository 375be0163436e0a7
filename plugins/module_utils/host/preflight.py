# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""Preflight: one hierarchical verdict per host, PASS / FAIL / SKIP per check, a remediation for every FAIL.

Pure functions (all but :func:`gather_preflight`, which reads) over the ``tee_host_info`` facts
(:func:`host_facts.gather_host_facts`), the capacity report
(:func:`capacity_facts.capacity_facts`) and the hardware registers (:mod:`hardware_keys`). The rules that
say *why* something is not ready live in :mod:`readiness`; this module arranges them as checks an operator
reads top-down, and adds the ones a whole-host verdict needs (keys, vsock, GPU passthrough, attestation).

Verdicts:

* ``PASS``: confirmed good. ``FAIL``: confirmed bad, always with ``remediation``. ``SKIP``: does not apply
  to this host, or cannot be determined; ``detail`` says which (an unknown is never a PASS or a FAIL).
* A section is ``FAIL`` if any check fails, ``PASS`` if any passes and none fails, else ``SKIP``; the host
  verdict combines the sections the same way. ``ready`` is stricter: every check of the CPU TEE section
  (TDX on Intel, SEV-SNP on AMD) passes and the free-keys check does not fail.
"""

from __future__ import annotations

from ansible_collections.confidential.tee.plugins.module_utils.common import tee, tee_registry
from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import HostReader
from ansible_collections.confidential.tee.plugins.module_utils.common.results import FAIL, PASS, SKIP, check_record
from ansible_collections.confidential.tee.plugins.module_utils.host.capacity_facts import capacity_facts
from ansible_collections.confidential.tee.plugins.module_utils.host.hardware_keys import gather_hardware_keys
from ansible_collections.confidential.tee.plugins.module_utils.host.readiness import (
    SEV_KINDS,
    TDX_DMESG_HINT,
    apply_capacity,
    sev_kvm_reasons,
    snp_iommu_reasons,
    tdx_cpu_reasons,
    tdx_kvm_reasons,
)
from ansible_collections.confidential.tee.plugins.module_utils.host.sev_asids import sev_asid_split

NVIDIA_PCI_VENDOR = "0x10de"
# PCI base class + subclass: VGA (0x0300) and 3D (0x0302) controllers are GPUs, 0x0680 an NVSwitch.
NVIDIA_PCI_CLASSES = ("0x0300", "0x0302", "0x0680")
VERDICTS = (PASS, FAIL, SKIP)
TEE_RESOURCE = tee_registry.per_vendor(lambda t: t.misc)
TEE_SECTION = tee_registry.per_vendor(lambda t: t.preflight)


def check(check_id, title, verdict, detail, remediation=None, source=None) -> dict:
    """One check as the collection's check record (``name`` the id, ``status`` the verdict, ``message`` the detail,
    ``fix`` the remediation), with its ``title`` and ``source``; a FAIL without a remediation is a bug in this module.
    ``id``, ``verdict``, ``detail`` and ``remediation`` repeat the record under their old names until release 0.3.0.
    """
    if verdict == FAIL and not remediation:
        raise ValueError("check %s fails without a remediation" % check_id)
    fix = remediation if verdict == FAIL else None
    return check_record(
        check_id,
        verdict,
        detail,
        fix,
        title=title,
        source=source,
        id=check_id,
        verdict=verdict,
        detail=detail,
        remediation=fix,
    )


def combine(verdicts) -> str:
    verdicts = list(verdicts)
    if FAIL in verdicts:
        return FAIL
    return PASS if PASS in verdicts else SKIP


def section(section_id, title, checks, skipped=None) -> dict:
    """A group of checks, or a whole section that does not apply (``skipped`` says why)."""
    return {
        "id": section_id,
        "title": title,
        "verdict": SKIP if skipped else combine(c["status"] for c in checks),
        "reason": skipped,
        "checks": [] if skipped else checks,
    }


def _vendor_skip(facts, wanted, technology):
    vendor = facts.get("tee_vendor")
    if vendor == wanted:
        return None
    cpu_vendor = (facts.get("cpu") or {}).get("vendor")
    if cpu_vendor is None:
        return "CPU vendor unknown (/proc/cpuinfo unreadable): cannot evaluate %s" % technology
    return "CPU vendor is %s: %s needs %s" % (cpu_vendor, technology, tee_registry.by_vendor(wanted).vendor_name)


# ---------------------------------------------------------------------------------------------------
# TDX
# ---------------------------------------------------------------------------------------------------


def _tdx_cpu_check(facts):
    flag = facts["cpu"]["flags"]["tdx_host_platform"]
    title = "CPU flag tdx_host_platform"
    if flag is None:
        return check("tdx.cpu_flag", title, SKIP, "/proc/cpuinfo could not be read: CPU features unknown")
    if flag:
        return check("tdx.cpu_flag", title, PASS, "set on every CPU: the kernel initialised TDX")
    reasons = tdx_cpu_reasons(facts["cpu"], facts["cmdline"], facts.get("power") or {})
    fix = (
        "run on bare metal"
        if facts["cpu"]["flags"]["hypervisor"]
        else "enable TME, TME-MT/TDX key split and "
        "TDX in the BIOS, boot a CONFIG_INTEL_TDX_HOST kernel, check %s" % TDX_DMESG_HINT
    )
    return check("tdx.cpu_flag", title, FAIL, "; ".join(reasons), fix)


def _tdx_kvm_check(facts):
    value = facts["kvm"]["intel"]["tdx"]
    title = "kvm_intel tdx=Y"
    if value is True:
        return check("tdx.kvm", title, PASS, "/sys/module/kvm_intel/parameters/tdx is Y")
    reasons = tdx_kvm_reasons(facts["kvm"], facts["cmdline"], facts["kernel"])
    if not reasons:
        return check("tdx.kvm", title, SKIP, "kvm_intel tdx parameter unknown")
    if facts["kvm"]["intel"]["loaded"] is False:
        fix = "load kvm_intel with TDX on (`modprobe kvm_intel tdx=1`) and make it persistent (role tdx_host)"
    elif value is None:
        fix = "boot a kernel whose KVM supports TDX (upstream 6.16+ or a vendor TDX kernel)"
    else:
        fix = "add kvm_intel.tdx=1 to the kernel command line (role confidential.tee.tdx_host) and reboot"
    return check("tdx.kvm", title, FAIL, "; ".join(reasons), fix)


def _tdx_hibernation_check(facts):
    title = "hibernation unavailable (nohibernate)"
    available = (facts.get("power") or {}).get("hibernation_available")
    nohibernate = facts["cmdline"].get("nohibernate")
    fix = "add nohibernate to the kernel command line (role confidential.tee.tdx_host) and reboot"
    if available is False:
        return check("tdx.hibernation", title, PASS, "/sys/power/state offers no disk state", source="/sys/power/state")
    if available:
        return check("tdx.hibernation", title, FAIL, "/sys/power/state offers disk: TDX refuses to initialise", fix)
    if nohibernate:
        return check("tdx.hibernation", title, PASS, "nohibernate is on the command line", source="/proc/cmdline")
    if nohibernate is False:
        return check("tdx.hibernation", title, FAIL, "nohibernate is not on the command line", fix)
    return check("tdx.hibernation", title, SKIP, "/sys/power/state and /proc/cmdline unreadable")


def _tdx_hardware_keys_text(msr):
    return (
        "%d TDX guest keys from the hardware (MSR 0x87 IA32_MKTME_KEYID_PARTITIONING: %d MKTME and %d TDX "
        "KeyIDs; one TDX KeyID is the TDX module's global KeyID)"
        % (msr["tdx_guest_keyids"], msr["mktme_keyids"], msr["tdx_keyids"])
    )


# misc.capacity is written by the kernel (kernel/cgroup/misc.c, misc_cg_capacity_show): content it would never
# write means the file read is not the live kernel's (a copy, a wrong bind mount, a container's own cgroupfs).
UNREADABLE_CAPACITY_FIX = (
    "read misc.capacity from the host's root cgroup: point host_root at the host's root filesystem with /sys "
    "mounted (in a pod, the host's cgroup namespace or /proc/1/root), and check the file with "
    "`cat /sys/fs/cgroup/misc.capacity`"
)


def _unknown_capacity(resource, entry) -> str:
    """A SKIP's detail (a SKIP carries no remediation field): why the capacity is unknown, then what to do."""
    reasons = "; ".join(entry.get("unknown") or ["it was not read"])
    return "%s capacity unknown, because %s. To know it: %s" % (resource, reasons, UNREADABLE_CAPACITY_FIX)


def _tdx_keys_check(facts, capacity, hardware):
    title = "TDX keys > 0"
    entry = (capacity.get("resources") or {}).get("tdx") or {}
    if entry.get("capacity"):
        return check("tdx.keys", title, PASS, "%d TDX keys in misc.capacity" % entry["capacity"], source="misc")
    if entry.get("capacity") is None and entry.get("unknown"):
        # An unreadable or garbled misc.capacity is not a capacity of 0: the BIOS/TDX-module fix would be wrong.
        return check("tdx.keys", title, SKIP, _unknown_capacity("tdx", entry))
    counted, why = hardware.get("tdx_misc_resource"), hardware.get("tdx_misc_reason")
    msr = hardware.get("tdx") or {}
    if msr.get("readable"):
        keys = msr["tdx_guest_keyids"]
        if not keys:
            return check(
                "tdx.keys",
                title,
                FAIL,
                "the BIOS assigned %d TDX KeyIDs (MSR 0x87): none left for guests" % msr["tdx_keyids"],
                "set a TME-MT/TDX key split with TDX KeyIDs in the BIOS (at least 2)",
                source="hardware",
            )
        if counted is False:
            return check(
                "tdx.keys",
                title,
                PASS,
                "%s. FROM THE HARDWARE, NOT THE KERNEL: %s, so key usage cannot be counted"
                % (_tdx_hardware_keys_text(msr), why),
                source="hardware",
            )
        return check(
            "tdx.keys",
            title,
            FAIL,
            "%s, but the kernel reports TDX capacity 0: %s" % (_tdx_hardware_keys_text(msr), why),
            _zero_capacity_hint("tdx"),
            source="hardware",
        )
    if counted is True:
        return check("tdx.keys", title, FAIL, "misc.capacity has no tdx keys: %s" % why, _zero_capacity_hint("tdx"))
    return check(
        "tdx.keys",
        title,
        SKIP,
        "%s; the hardware fallback (MSR 0x87) could not be read either: %s. Load the msr module and run as root "
        "to see the hardware key count" % (why or "TDX keys unknown", msr.get("problem") or "not read"),
    )


def tdx_section(facts, capacity, hardware) -> dict:
    skipped = _vendor_skip(facts, "intel", "TDX")
    if skipped:
        return section("tdx", "Intel TDX", [], skipped)
    cpu_check = _tdx_cpu_check(facts)
    if cpu_check["status"] == FAIL and facts["cpu"]["flags"]["hypervisor"]:
        # A virtual machine cannot host TDs: the kernel, KVM and key checks would only add noise.
        why = "not evaluated: a virtual machine cannot host TDX guests"
        rest = [
            check("tdx.kvm", "kvm_intel tdx=Y", SKIP, why),
            check("tdx.hibernation", "hibernation unavailable (nohibernate)", SKIP, why),
            check("tdx.keys", "TDX keys > 0", SKIP, why),
        ]
    else:
        rest = [_tdx_kvm_check(facts), _tdx_hibernation_check(facts), _tdx_keys_check(facts, capacity, hardware)]
    return section("tdx", "Intel TDX", [cpu_check, *rest])


# ---------------------------------------------------------------------------------------------------
# SEV, SEV-ES, SEV-SNP
# ---------------------------------------------------------------------------------------------------


def _sev_flags_check(facts):
    flags = facts["cpu"]["flags"]
    title = "CPU flags sev, sev_es, sev_snp"
    values = {name: flags[name] for name in ("sev", "sev_es", "sev_snp")}
    if None in values.values():
        return check("sev.cpu_flags", title, SKIP, "/proc/cpuinfo could not be read: CPU features unknown")
    missing = [name for name, value in values.items() if not value]
    if not missing:
        return check("sev.cpu_flags", title, PASS, "sev, sev_es and sev_snp set on every CPU")
    return check(
        "sev.cpu_flags",
        title,
        FAIL,
        "missing from /proc/cpuinfo: %s" % ", ".join(missing),
        "enable SME, SEV, the SEV-ES ASID space and SNP (with the RMP table) in the BIOS",
    )


def _sev_kvm_check(facts):
    title = "kvm_amd sev, sev_es, sev_snp = Y"
    reasons = []
    for kind in SEV_KINDS:
        reasons += [
            r for r in sev_kvm_reasons(kind, facts["kvm"], facts["cmdline"], facts["kernel"]) if r not in reasons
        ]
    if not reasons:
        return check("sev.kvm", title, PASS, "kvm_amd enabled SEV, SEV-ES and SEV-SNP")
    return check(
        "sev.kvm",
        title,
        FAIL,
        "; ".join(reasons),
        "load kvm_amd with sev, sev_es and sev_snp enabled (role confidential.tee.snp_host), kernel 6.11+ for SNP",
    )


def _sev_device_check(facts):
    present = facts["devices"]["sev"]
    if present is None:
        return check("sev.device", "/dev/sev", SKIP, "/dev/sev could not be examined")
    if present:
        return check("sev.device", "/dev/sev", PASS, "/dev/sev exists (PSP driver ccp loaded)")
    return check(
        "sev.device",
        "/dev/sev",
        FAIL,
        "/dev/sev is missing: QEMU cannot launch SEV guests",
        "load the PSP driver (`modprobe ccp`)",
    )


def _sev_iommu_check(facts):
    title = "IOMMU on, not passthrough"
    reasons = snp_iommu_reasons(facts["iommu"], facts["cmdline"])
    if reasons:
        return check(
            "sev.iommu",
            title,
            FAIL,
            "; ".join(reasons),
            "remove iommu=pt / iommu.passthrough=1 (snp_host_remove_iommu_pt: true), enable the IOMMU and reboot",
        )
    if facts["iommu"].get("enabled") is None:
        return check("sev.iommu", title, SKIP, "IOMMU groups unreadable")
    return check("sev.iommu", title, PASS, "default domain %s" % (facts["iommu"].get("default_domain") or "translated"))


def _sev_asid_check(hardware, capacity):
    title = "ASID split (CPUID 0x8000001F) matches misc.capacity"
    cpuid = hardware.get("sev") or {}
    if not cpuid.get("readable"):
        return check("sev.asids", title, SKIP, "CPUID 0x8000001F not read: %s" % (cpuid.get("problem") or "n/a"))
    cross = cpuid["cross_check"]
    numbers = ", ".join(
        "%s: CPUID gives %s, misc.capacity %s" % (name, entry["expected"], entry["misc_capacity"])
        for name, entry in cross["compared"].items()
    )
    if not cpuid["max_asid"]:
        split = "CPUID 0x8000001F offers no ASIDs (max ASID 0: no SEV in this CPU, its BIOS or this VM)"
    else:
        split = "max ASID %d, min SEV ASID %d (sev_es = %d - 1)" % (
            cpuid["max_asid"],
            cpuid["min_sev_asid"],
            cpuid["min_sev_asid"],
        )
    if cross["agrees"] is None:
        return check("sev.asids", title, SKIP, "%s; misc.capacity unknown (%s)" % (split, numbers), source="cpuid")
    if cross["agrees"]:
        return check("sev.asids", title, PASS, "%s; %s" % (split, numbers), source="cpuid")
    return check(
        "sev.asids",
        title,
        FAIL,
        "%s; %s: the kernel did not set up every ASID the CPU offers" % (split, numbers),
        "check `dmesg | grep -i sev` (KVM prints the ASID ranges it enabled) and the kvm_amd sev/sev_es "
        "parameters; after a BIOS change of the SEV-ES ASID space limit, reboot",
        source="cpuid",
    )


def _zero_capacity_hint(resource):
    # Imported here, on the failing path only: every line imported is compiled again on every host and run
    # (AnsiballZ's zipimport keeps no bytecode; docs/fleet.md, "Where the per-host time goes").
    from ansible_collections.confidential.tee.plugins.module_utils.host.capacity_check import ZERO_CAPACITY_HINTS

    return ZERO_CAPACITY_HINTS[resource]


def _exhaustion_signature(resource):
    # On the failing path only, for the same reason as _zero_capacity_hint.
    from ansible_collections.confidential.tee.plugins.module_utils.host.capacity_check import EXHAUSTION_SIGNATURES

    return EXHAUSTION_SIGNATURES[resource]


def _sev_keys_check(capacity):
    entry = (capacity.get("resources") or {}).get("sev_es") or {}
    title = "SEV-ES/SNP ASIDs > 0 (sev_es)"
    controller = capacity.get("misc_controller") or {}
    if not controller.get("present"):
        if controller.get("not_root_cgroup"):
            return check("sev.keys", title, SKIP, controller["reason"])
        return check("sev.keys", title, SKIP, "no misc cgroup controller: ASIDs are not counted by this kernel")
    if entry.get("capacity") is None:
        return check("sev.keys", title, SKIP, _unknown_capacity("sev_es", entry))
    if entry["capacity"] > 0:
        return check("sev.keys", title, PASS, "%d SEV-ES/SNP ASIDs in misc.capacity" % entry["capacity"], source="misc")
    return check("sev.keys", title, FAIL, "misc.capacity has no sev_es ASIDs", _zero_capacity_hint("sev_es"))


def _snp_asids_check(facts):
    """What ciphertext hiding does to the SNP key count (sev_asids.py): the joint sev_es count overstates SNP."""
    title = "SNP ASIDs (ciphertext hiding split)"
    split = facts.get("sev_asids") or {}
    snp = split.get("snp") or {}
    if split.get("ciphertext_hiding") is None:
        return check("sev.snp_asids", title, SKIP, split.get("summary") or "not read")
    if split["ciphertext_hiding"] and snp.get("capacity") == 0 and facts["kvm"]["amd"].get("sev_snp"):
        return check(
            "sev.snp_asids",
            title,
            FAIL,
            split["summary"],
            "set kvm_amd.ciphertext_hiding_asids to the number of SNP guests wanted (less than the joint range to keep "
            "SEV-ES usable) and reboot or reload kvm_amd",
            source="kvm_amd",
        )
    source = "kvm_amd" if split["ciphertext_hiding"] else "misc"
    return check("sev.snp_asids", title, PASS, split["summary"], source=source)


def sev_section(facts, capacity, hardware) -> dict:
    skipped = _vendor_skip(facts, "amd", "SEV-SNP")
    if skipped:
        return section("sev_snp", "AMD SEV-ES / SEV-SNP", [], skipped)
    checks = [
        _sev_flags_check(facts),
        _sev_kvm_check(facts),
        _sev_device_check(facts),
        _sev_iommu_check(facts),
        _sev_asid_check(hardware, capacity),
        _sev_keys_check(capacity),
        _snp_asids_check(facts),
    ]
    return section("sev_snp", "AMD SEV-ES / SEV-SNP", checks)


# ---------------------------------------------------------------------------------------------------
# vsock, IOMMU and GPU passthrough, GPU confidential computing
# ---------------------------------------------------------------------------------------------------


def vsock_section(facts) -> dict:
    present = facts["vsock"]["vhost_vsock"]
    title = "/dev/vhost-vsock"
    if present is None:
        result = check("vsock.vhost", title, SKIP, "/dev/vhost-vsock could not be examined")
    elif present:
        result = check("vsock.vhost", title, PASS, "vhost_vsock loaded: guests get a vsock (Kata agent, attestation)")
    else:
        result = check(
            "vsock.vhost",
            title,
            FAIL,
            "/dev/vhost-vsock is missing: Kata's agent and KubeVirt's vsock need it",
            "load vhost_vsock now and at boot (role confidential.tee.vsock)",
        )
    return section("vsock", "vsock", [result])


def _gpu_devices_text(devices):
    return ", ".join("%s (%s)" % (d["bdf"], d["driver"] or "no driver") for d in devices)


def _iommu_enabled_check(facts, devices):
    iommu = facts["iommu"]
    needed = bool(devices) or facts.get("tee_vendor") == "amd"
    title = "IOMMU groups"
    if iommu.get("enabled") is None:
        return check("iommu.enabled", title, SKIP, "/sys/kernel/iommu_groups unreadable")
    if iommu["enabled"]:
        return check("iommu.enabled", title, PASS, "%d IOMMU groups" % iommu["groups"])
    if not needed:
        return check(
            "iommu.enabled", title, SKIP, "no IOMMU groups; not needed: no NVIDIA device to pass through, not SEV-SNP"
        )
    return check(
        "iommu.enabled",
        title,
        FAIL,
        "; ".join(iommu.get("reasons") or ["no IOMMU groups"]),
        "enable VT-d/AMD-Vi in the BIOS, intel_iommu=on on Intel (role confidential.tee.iommu_passthrough), reboot",
    )


def nvidia_devices(pci) -> list[dict]:
    """NVIDIA GPUs (VGA and 3D controllers) and NVSwitches among the host's PCI functions (the ``pci`` fact)."""
    return [
        d
        for d in pci.get("devices") or []
        if (d.get("vendor") or "").lower() == NVIDIA_PCI_VENDOR and (d.get("class") or "").lower() in NVIDIA_PCI_CLASSES
    ]


def _gpu_passthrough_checks(pci):
    devices = nvidia_devices(pci)
    if not pci.get("readable", True):
        why = "/sys/bus/pci/devices could not be read"
    elif not devices:
        why = "no NVIDIA GPU or NVSwitch on the PCI bus (/sys/bus/pci/devices lists none)"
    else:
        why = None
    if why:
        return [
            check("iommu.gpu_groups", "NVIDIA devices in IOMMU groups", SKIP, why),
            check("iommu.gpu_vfio", "NVIDIA devices bound to vfio-pci", SKIP, why),
        ]
    ungrouped = [d for d in devices if not d["iommu_group"]]
    not_vfio = [d for d in devices if d["driver"] != "vfio-pci"]
    groups = check(
        "iommu.gpu_groups",
        "NVIDIA devices in IOMMU groups",
        FAIL if ungrouped else PASS,
        ("not in an IOMMU group: %s" % _gpu_devices_text(ungrouped))
        if ungrouped
        else "groups %s" % ", ".join(sorted({d["iommu_group"] for d in devices})),
        "turn the IOMMU on (BIOS VT-d/AMD-Vi, intel_iommu=on) and reboot: devices outside a group cannot be passed "
        "through",
    )
    vfio = check(
        "iommu.gpu_vfio",
        "NVIDIA devices bound to vfio-pci",
        FAIL if not_vfio else PASS,
        ("not on vfio-pci: %s" % _gpu_devices_text(not_vfio)) if not_vfio else "all on vfio-pci",
        "bind them to vfio-pci for passthrough to confidential guests (role confidential.tee.iommu_passthrough with "
        "iommu_passthrough_bind_nvidia: true)",
    )
    return [groups, vfio]


def iommu_section(facts) -> dict:
    pci = facts.get("pci") or {"readable": False, "devices": []}
    checks = [_iommu_enabled_check(facts, nvidia_devices(pci)), *_gpu_passthrough_checks(pci)]
    return section("iommu", "IOMMU and GPU passthrough", checks)


def gpu_section(facts) -> dict:
    gpu = facts.get("gpu") or {}
    if not gpu.get("probed"):
        return section("gpu", "NVIDIA GPU confidential computing", [], (gpu.get("reasons") or ["not probed"])[0])
    if gpu.get("present") is False:
        return section("gpu", "NVIDIA GPU confidential computing", [], "nvidia-smi lists no GPU")
    reasons = "; ".join(gpu.get("reasons") or [])
    capable = gpu.get("cc_capable")
    checks = [
        check("gpu.cc_capable", "GPU CC capable", SKIP, "nvidia-smi did not say")
        if capable is None
        else check(
            "gpu.cc_capable",
            "GPU CC capable",
            PASS if capable else FAIL,
            "GPU CC capabilities: %s" % ("CC Capable" if capable else "none"),
            "use a CC-capable GPU (Hopper or newer) for confidential guests",
        )
    ]
    enabled = gpu.get("cc_enabled")
    if enabled is None:
        checks.append(check("gpu.cc_mode", "GPU CC mode on", SKIP, "CC state unknown"))
    else:
        on = enabled and not gpu.get("devtools")
        checks.append(
            check(
                "gpu.cc_mode",
                "GPU CC mode on",
                PASS if on else FAIL,
                "CC state %s%s" % (gpu.get("cc_state"), "" if on else ": " + reasons),
                "set CC mode on with NVIDIA gpu-admin-tools (`nvidia_gpu_tools.py --set-cc-mode=on "
                "--reset-after-cc-mode-switch`)",
            )
        )
    state = gpu.get("ready_state")
    checks.append(
        check("gpu.ready", "GPUs ready state", SKIP, "ready state unknown")
        if state is None
        else check(
            "gpu.ready",
            "GPUs ready state",
            PASS if state == "ready" else FAIL,
            "CC GPUs ready state: %s" % state,
            "with CC on, attest the GPU inside the confidential guest, then `nvidia-smi conf-compute -srs 1`",
        )
    )
    return section("gpu", "NVIDIA GPU confidential computing", checks)


# ---------------------------------------------------------------------------------------------------
# Attestation (pluggable) and free keys
# ---------------------------------------------------------------------------------------------------

NO_ATTESTATION = (
    "no attestation result given: register the result of confidential.tee.tdx_attestation_check and pass it as "
    "`attestation` (keys verdict or ok, msg, remediation) to include the chain"
)


def attestation_section(attestation) -> dict:
    """The attestation chain, from the result of an attestation check module when one was given."""
    title = "attestation chain"
    if attestation is None:
        return section("attestation", "Attestation", [], NO_ATTESTATION)
    verdict = str(attestation.get("verdict") or "").upper()
    if verdict not in VERDICTS:
        if attestation.get("failed") or attestation.get("ok") is False:
            verdict = FAIL
        elif attestation.get("ok") is True:
            verdict = PASS
        else:
            verdict = SKIP
    detail = str(attestation.get("msg") or attestation.get("detail") or "no message")
    remediation = str(attestation.get("remediation") or detail)
    return section(
        "attestation", "Attestation", [check("attestation.chain", title, verdict, detail, remediation, "attestation")]
    )


def keys_section(facts, capacity, hardware, min_free) -> dict:
    """Free keys of the CPU TEE's resource (``tdx`` on Intel, ``sev_es`` on AMD) against ``min_free``."""
    resource = TEE_RESOURCE.get(facts.get("tee_vendor"))
    title = "free keys >= %d" % min_free
    if resource is None:
        return section("keys", "TEE keys", [], "no TDX or SEV CPU: no keys to count")
    controller = capacity.get("misc_controller") or {}
    entry = (capacity.get("resources") or {}).get(resource) or {}
    if not controller.get("present"):
        why = "%s keys cannot be counted: %s" % (resource, controller.get("reason"))
    elif resource == "tdx" and hardware.get("tdx_misc_resource") is False:
        why = "this kernel does not count TDX keys: %s" % hardware.get("tdx_misc_reason")
    elif entry.get("free") is None:
        why = "%s free keys unknown: %s" % (resource, "; ".join(entry.get("unknown") or ["no value"]))
    else:
        why = None
    if why:
        return section("keys", "TEE keys", [check("keys.free", title, SKIP, why)])
    bound = " at most" if entry.get("free_is_upper_bound") else ""
    numbers = "%s:%s %d of %d free (%d in use)" % (resource, bound, entry["free"], entry["capacity"], entry["current"])
    free = entry["free"]
    snp = ((facts.get("sev_asids") or {}).get("snp") or {}).get("capacity")
    if resource == tee.SEV_ES and (facts.get("sev_asids") or {}).get("ciphertext_hiding") and snp is not None:
        # misc.current charges SEV-ES and SNP guests alike: SNP's own usage is unknown, only its ceiling is.
        free = min(free, snp)
        numbers += "; SNP can use at most %d of them (ciphertext hiding: SNP ASIDs 1..%d)" % (free, snp)
    enough = free >= min_free
    fix = (
        None
        if enough
        else "stop unused guests, or cordon this node and move confidential workloads elsewhere: %s"
        % _exhaustion_signature(resource)
    )
    result = check("keys.free", title, PASS if enough else FAIL, numbers, fix, source="misc")
    return section("keys", "TEE keys", [result])


# ---------------------------------------------------------------------------------------------------
# The whole host
# ---------------------------------------------------------------------------------------------------


def _ready(vendor, sections) -> tuple[bool, list[str]]:
    """Strict readiness: every check of the CPU TEE section passes and free keys do not fail."""
    wanted = TEE_SECTION.get(vendor)
    by_id = {s["id"]: s for s in sections}
    if wanted is None:
        names = " or ".join(t.name for t in tee_registry.REGISTRY)
        return False, ["no %s CPU (vendor %s)" % (names, vendor or "unknown")]
    if wanted not in by_id:
        return False, ["preflight has no checks for %s yet" % tee_registry.by_vendor(vendor).name]
    blocking = []
    for item in by_id[wanted]["checks"] + by_id["keys"]["checks"]:
        if item["status"] == FAIL or (item["status"] == SKIP and item["name"] != "keys.free"):
            blocking.append("%s %s: %s" % (item["name"], item["status"], item["message"]))
    return not blocking, blocking


def preflight_verdict(facts, capacity, hardware, min_free_keys=1, attestation=None) -> dict:
    """The host's verdict: ``verdict``, ``ready``, ``technology``, ``counts``, ``blocking``, ``sections``, ``table``."""
    sections = [
        tdx_section(facts, capacity, hardware),
        sev_section(facts, capacity, hardware),
        keys_section(facts, capacity, hardware, min_free_keys),
        vsock_section(facts),
        iommu_section(facts),
        gpu_section(facts),
        attestation_section(attestation),
    ]
    ready, blocking = _ready(facts.get("tee_vendor"), sections)
    verdicts = [c["status"] for s in sections for c in s["checks"]]
    result = {
        "verdict": combine(s["verdict"] for s in sections),
        "ready": ready,
        "technology": tee_registry.per_vendor(lambda t: t.name).get(facts.get("tee_vendor")),
        "min_free_keys": min_free_keys,
        "counts": {v: verdicts.count(v) for v in VERDICTS},
        "blocking": blocking,
        "sections": sections,
    }
    result["table"] = format_table(result)
    return result


def gather_preflight(host: HostReader, facts, min_free_keys=1, attestation=None) -> dict:
    """Add ``capacity`` (with the top-level cgroups), ``hardware_keys`` and ``preflight`` to host ``facts``.

    What ``tee_host_info`` does with ``preflight: true``; ``facts`` come from :func:`host_facts.gather_host_facts`
    on the same ``host``.
    """
    # One level of cgroups: the misc.events counters of the top-level slices, for metrics and drift.
    facts["capacity"] = capacity_facts(host, cgroups=True, cgroup_depth=1)
    facts["hardware_keys"] = gather_hardware_keys(host, facts, facts["capacity"])
    facts["sev_asids"] = sev_asid_split(facts["kvm"]["amd"], facts["capacity"], facts["hardware_keys"].get("sev"))
    apply_capacity(facts, facts["capacity"])
    facts["preflight"] = preflight_verdict(facts, facts["capacity"], facts["hardware_keys"], min_free_keys, attestation)
    return facts


def _wrap(first, text, indent, width=118) -> list[str]:
    """``first`` followed by ``text``, folded at spaces into lines of about ``width`` characters, continuation lines
    indented by ``indent`` spaces: the whole text, never cut (a fix that ends in '...' is no fix)."""
    lines, line = [], first
    for word in str(text).split():
        if line.strip() and len(line) + 1 + len(word) > width and len(line) > indent:
            lines.append(line)
            line = " " * indent + word
        else:
            line = line + word if line.endswith(" ") or not line else line + " " + word
    return [*lines, line]


def format_table(verdict) -> list[str]:
    """The verdict as a short table for people: one line per section and check, fixes for failures (long texts
    wrap onto indented lines)."""
    counts = verdict["counts"]
    lines = [
        "%s  %s for %s; %d PASS, %d FAIL, %d SKIP"
        % (
            verdict["verdict"],
            "ready" if verdict["ready"] else "NOT READY",
            "%s guests" % verdict["technology"] if verdict["technology"] else "no TDX or SEV-SNP CPU",
            counts[PASS],
            counts[FAIL],
            counts[SKIP],
        )
    ]
    for item in verdict["sections"]:
        head = "%-4s  %s" % (item["verdict"], item["title"])
        lines += _wrap(head + (": " if item["reason"] else ""), item["reason"] or "", 6)
        for entry in item["checks"]:
            lines += _wrap("  %-4s  %-38s " % (entry["status"], entry["title"]), entry["message"], 47)
            if entry["fix"]:
                lines += _wrap("        fix: ", entry["fix"], 13)
    return lines
