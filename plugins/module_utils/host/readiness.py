# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""Every readiness rule of the collection, in one place: TDX, SEV/SEV-ES/SNP, SGX, IOMMU, CPU vendor.

Pure functions from the facts :mod:`host_facts` reads to verdicts with reasons an operator can act on.
``tee_host_info`` returns their results; roles, playbooks and the post-boot verification consume those
facts instead of re-deriving any rule in Jinja, so changing a rule means changing one function here.

Kernel facts behind the rules:

* ``tdx_host_platform`` appears in ``/proc/cpuinfo`` only after the kernel's TDX init succeeded, and that
  init refuses to run while hibernation is available (``arch/x86/virt/vmx/tdx/tdx.c``):
  ``nohibernate``, ``hibernate=no`` or kernel lockdown make it unavailable; ``disk`` missing from
  ``/sys/power/state`` is the running kernel's own answer.
* ``/sys/module/kvm_intel/parameters/tdx`` and ``kvm_amd`` ``sev``/``sev_es``/``sev_snp`` are written
  back by KVM after hardware setup: ``Y`` means usable now.
* ``drivers/iommu/amd/init.c`` ``iommu_snp_enable()`` disables SEV-SNP when the IOMMU is off, when the
  default domain is passthrough (``iommu=pt``, ``iommu.passthrough=1`` or a kernel built with
  ``CONFIG_IOMMU_DEFAULT_PASSTHROUGH``), or when the v2 page table is selected (``amd_iommu=pgtbl_v2``).
  The IOMMU groups' ``type`` files show the default domain the running kernel really uses.
"""

from __future__ import annotations

from ansible_collections.confidential.tee.plugins.module_utils.common import tee_registry
from ansible_collections.confidential.tee.plugins.module_utils.host.cmdline import cmdline_facts

KVM_TDX_SINCE = (6, 16)
# What the kernel prints about TDX, for people: nothing here decides from log text (the wording changed in 7.1),
# readiness comes from kvm_intel's tdx parameter and the tdx line of misc.capacity. arch/x86/virt/vmx/tdx/tdx.c
# (pr_fmt "virt/tdx: "): every version prints "BIOS enabled: private KeyID range [a, b)" at boot (tdx_init);
# 6.x initialises the TDX module when kvm_intel loads with tdx=1 and prints "module initialized" or "module
# initialization failed (<err>)"; from 7.1 ("KVM: x86/tdx: Have TDX handle VMXON during bringup", v2 2025-12)
# it is initialised at boot (subsys initcall) and prints "TDX-Module initialized" or "TDX-Module initialization
# failed (<err>)". KVM's own TDX lines are prefixed "kvm_intel: ", so grep -i tdx finds all of them.
TDX_DMESG_HINT = (
    "`dmesg | grep -i tdx`: 'virt/tdx: BIOS enabled: private KeyID range [a, b)' means the BIOS split the keys; "
    "then a 6.x kernel prints 'virt/tdx: module initialized' when kvm_intel loads with tdx=1 and a 7.1+ kernel "
    "'virt/tdx: TDX-Module initialized' at boot, or '... initialization failed (<errno>)' on failure"
)
KVM_SNP_SINCE = (6, 11)
# /proc/cpuinfo vendor_id -> tee_cpu_vendor, from the TEE registry.
VENDORS = tee_registry.CPU_VENDORS


def _version_text(version) -> str:
    return ".".join(str(part) for part in version)


def _older_than(kernel, since) -> bool:
    version = kernel.get("version")
    return version is not None and tuple(version[:2]) < since


def tee_vendor(cpu) -> str | None:
    """``intel`` or ``amd`` from ``vendor_id``; ``None`` for any other CPU or an unreadable cpuinfo."""
    return VENDORS.get(cpu.get("vendor") or "")


# ---------------------------------------------------------------------------------------------------
# IOMMU
# ---------------------------------------------------------------------------------------------------


def iommu_passthrough(iommu, cmdline) -> bool | None:
    """Whether DMA bypasses translation: the running kernel's groups first, then the command line."""
    types = iommu.get("group_types") or {}
    if types and None not in types:
        return set(types) == {"identity"}
    # Not on the command line: the kernel's build default (CONFIG_IOMMU_DEFAULT_*) decides, unknown here.
    return (cmdline.get("iommu") or {}).get("passthrough")


def summarize_iommu(iommu, cmdline, vendor) -> dict:
    enabled = iommu["enabled"]
    passthrough = iommu_passthrough(iommu, cmdline)
    reasons = []
    if enabled is False:
        if vendor == "intel" and not cmdline.get("intel_iommu_on"):
            reasons.append(
                "no IOMMU groups: the IOMMU is off; add intel_iommu=on to the kernel command line, enable VT-d "
                "in the BIOS and reboot (needed for GPU passthrough)"
            )
        else:
            reasons.append("no IOMMU groups: enable VT-d/AMD-Vi in the BIOS (and remove iommu=off) and reboot")
    if cmdline.get("iommu_off"):
        reasons.append("the IOMMU is disabled on the command line (%s)" % " ".join(cmdline["iommu"]["disabled_args"]))
    return {
        "enabled": enabled,
        "passthrough": passthrough,
        "default_domain": iommu.get("default_domain"),
        "ready": enabled is True and not cmdline.get("iommu_off"),
        "reasons": reasons,
    }


# ---------------------------------------------------------------------------------------------------
# TDX
# ---------------------------------------------------------------------------------------------------


def tdx_cpu_reasons(cpu, cmdline, power) -> list[str]:
    supported = cpu["flags"]["tdx_host_platform"]
    if supported is None:
        return ["cannot tell whether the CPU supports TDX: /proc/cpuinfo could not be read"]
    if supported:
        return []
    if cpu["flags"]["hypervisor"]:
        return [
            "CPU flag tdx_host_platform absent and this is a virtual machine (hypervisor flag): "
            "a TDX host must run on bare metal"
        ]
    why = (
        "CPU flag tdx_host_platform absent from /proc/cpuinfo: the kernel did not initialise TDX. Enable TME, "
        "TME-MT with a TDX key split and TDX (SEAM loader) in the BIOS, boot a kernel with CONFIG_INTEL_TDX_HOST, "
        "and check %s" % TDX_DMESG_HINT
    )
    if power.get("hibernation_available"):
        why += (
            "; hibernation is available on this kernel (/sys/power/state offers disk) and TDX refuses to "
            "initialise then: add nohibernate to the kernel command line and reboot"
        )
    elif power.get("hibernation_available") is None and cmdline.get("nohibernate") is False:
        why += (
            "; nohibernate is not on the command line and TDX refuses to initialise while hibernation is possible: "
            "add nohibernate and reboot"
        )
    return [why]


def tdx_kvm_reasons(kvm, cmdline, kernel) -> list[str]:
    param = kvm["intel"]["tdx"]
    if param is True:
        return []
    if kvm["intel"]["loaded"] is False:
        return ["kvm_intel is not loaded (no /sys/module/kvm_intel): load it with `modprobe kvm_intel tdx=1`"]
    if param is None and kvm["intel"]["loaded"]:
        why = "/sys/module/kvm_intel/parameters/tdx is missing or unreadable: this kernel's KVM has no TDX support"
        if _older_than(kernel, KVM_TDX_SINCE):
            since = _version_text(KVM_TDX_SINCE)
            why += " (kernel %s predates upstream KVM TDX in %s; use %s+ or a vendor TDX kernel)" % (
                kernel["release"],
                since,
                since,
            )
        return [why]
    if param is False and cmdline.get("kvm_intel_tdx") is True:
        return [
            "kvm_intel tdx parameter is N although kvm_intel.tdx=1 is on the command line: KVM could not set up "
            "TDX; check %s" % TDX_DMESG_HINT
        ]
    if param is False:
        return [
            "kvm_intel tdx parameter is N: add kvm_intel.tdx=1 to the kernel command line (or `options kvm_intel "
            "tdx=1` in /etc/modprobe.d/) and reboot"
        ]
    return []


def summarize_tdx(cpu, kvm, cmdline, kernel, qgs, power=None) -> dict:
    """TDX: ``supported`` (CPU flag), ``enabled`` (kvm_intel tdx=Y), ``ready`` (TDs can be launched)."""
    power = power or {}
    supported = cpu["flags"]["tdx_host_platform"]
    enabled = kvm["intel"]["tdx"] is True
    cmdline_ready = cmdline.get("kvm_intel_tdx") is True and bool(cmdline.get("nohibernate"))
    vendor = cpu.get("vendor")
    if vendor not in (None, "GenuineIntel"):
        # The kvm_intel and cmdline details would only be noise on another vendor's CPU.
        reasons = ["TDX needs an Intel Xeon host; this CPU's vendor is %s" % vendor]
        return _tdx_result(supported, enabled, cmdline_ready, qgs, reasons, [])
    reasons = tdx_cpu_reasons(cpu, cmdline, power) + tdx_kvm_reasons(kvm, cmdline, kernel)
    reasons += cmdline.get("problems", [])
    advice = []
    ready = supported is True and enabled
    if ready and not cmdline_ready:
        missing = [
            token
            for token, present in (
                ("kvm_intel.tdx=1", cmdline.get("kvm_intel_tdx") is True),
                ("nohibernate", bool(cmdline.get("nohibernate"))),
            )
            if not present
        ]
        advice.append(
            "TDX works now but %s is not on the kernel command line: make it persistent" % " and ".join(missing)
        )
    if ready and not qgs["is_socket"]:
        advice.append(
            "no Quote Generation Service socket at %s: TDs launch but cannot get attestation quotes; "
            "install and start qgsd (Intel DCAP)" % qgs["path"]
        )
    return _tdx_result(supported, enabled, cmdline_ready, qgs, reasons, advice)


def tdx_capacity_reasons(kernel, capacity) -> list[str]:
    """Why TDX is not ready although kvm_intel says tdx=Y: no ``tdx`` line in ``misc.capacity`` on a kernel that
    counts TDX keys (6.16+). Unknown or uncounted capacity says nothing (an old kernel or an unreadable file)."""
    controller = (capacity or {}).get("misc_controller") or {}
    entry = ((capacity or {}).get("resources") or {}).get("tdx") or {}
    if not controller.get("present") or entry.get("capacity") != 0:
        return []
    version = kernel.get("version")
    if version is None or tuple(version[:2]) < KVM_TDX_SINCE:
        return []
    return [
        "misc.capacity has no tdx line although kernel %s counts TDX keys (6.16+): KVM has no TDX KeyID to give a "
        "guest (TDX module not initialised, or every KeyID kept by the BIOS split); check %s"
        % (kernel.get("release"), TDX_DMESG_HINT)
    ]


def apply_capacity(facts, capacity) -> None:
    """Refine ``facts["tdx"]`` (and ``boot``) with the ``tdx`` line of ``misc.capacity`` once it was read.

    TDX readiness is kvm_intel's ``tdx`` parameter *and* KeyIDs in ``misc.capacity``; never log text.
    """
    entry = ((capacity or {}).get("resources") or {}).get("tdx") or {}
    tdx = facts["tdx"]
    tdx["misc_capacity"] = entry.get("capacity")
    if facts.get("tee_vendor") != "intel":
        return
    reasons = tdx_capacity_reasons(facts.get("kernel") or {}, capacity)
    if reasons:
        tdx["reasons"] = list(tdx["reasons"]) + reasons
        tdx["ready"] = False
    facts["boot"] = boot_verdict(facts)


def _tdx_result(supported, enabled, cmdline_ready, qgs, reasons, advice) -> dict:
    return {
        "supported": supported,
        "enabled": enabled,
        "cmdline_ready": cmdline_ready,
        "attestation_ready": bool(qgs["is_socket"]),
        "ready": supported is True and enabled,
        "reasons": reasons,
        "advice": advice,
    }


# ---------------------------------------------------------------------------------------------------
# SEV, SEV-ES, SEV-SNP
# ---------------------------------------------------------------------------------------------------

SEV_KINDS = (
    # (summary name, CPU flag, kvm_amd parameter, command-line key, label)
    ("sev", "sev", "sev", "kvm_amd_sev", "SEV"),
    ("sev_es", "sev_es", "sev_es", "kvm_amd_sev_es", "SEV-ES"),
    ("snp", "sev_snp", "sev_snp", "kvm_amd_sev_snp", "SEV-SNP"),
)


def sev_kvm_reasons(kind, kvm, cmdline, kernel) -> list[str]:
    name, _flag, param_name, cmd_key, label = kind
    param = kvm["amd"][param_name]
    if param is True:
        return []
    if kvm["amd"]["loaded"] is False:
        return ["kvm_amd is not loaded (no /sys/module/kvm_amd): load it with `modprobe kvm_amd`"]
    if param is None and kvm["amd"]["loaded"]:
        why = "/sys/module/kvm_amd/parameters/%s is missing or unreadable: this kernel's KVM has no %s" % (
            param_name,
            label,
        )
        if name == "snp" and _older_than(kernel, KVM_SNP_SINCE):
            why += " (kernel %s predates upstream SNP host support in %s)" % (
                kernel["release"],
                _version_text(KVM_SNP_SINCE),
            )
        return [why]
    if param is False and cmdline.get(cmd_key) is False:
        return [
            "kvm_amd.%s is disabled on the kernel command line: remove it or set kvm_amd.%s=1 and reboot"
            % (param_name, param_name)
        ]
    if param is False:
        return ["kvm_amd %s parameter is N: KVM could not enable %s; check `dmesg | grep -i sev`" % (param_name, label)]
    return []


def snp_iommu_reasons(iommu, cmdline) -> list[str]:
    reasons = []
    if cmdline.get("iommu_off") or iommu.get("enabled") is False:
        reasons.append("the IOMMU is off (no IOMMU groups or iommu=off/amd_iommu=off): SEV-SNP requires it")
    if iommu_passthrough(iommu, cmdline):
        culprits = " ".join(cmdline.get("iommu", {}).get("passthrough_args") or []) or "the kernel's build default"
        reasons.append(
            "the IOMMU default domain is passthrough (%s), and the AMD IOMMU driver then disables SEV-SNP: remove "
            "iommu=pt / iommu.passthrough=1 (snp_host_remove_iommu_pt: true) and reboot" % culprits
        )
    if cmdline.get("iommu", {}).get("amd_pgtable_v2"):
        reasons.append("amd_iommu=pgtbl_v2 selects the v2 page table, with which SEV-SNP is disabled: remove it")
    return reasons


def _summarize_sev_kind(kind, cpu, kvm, cmdline, kernel, devices, iommu) -> dict:
    name, flag, param_name, cmd_key, label = kind
    supported = cpu["flags"][flag]
    enabled = kvm["amd"][param_name] is True
    iommu_reasons = snp_iommu_reasons(iommu, cmdline) if name == "snp" else []
    # kvm_amd enables SEV, SEV-ES and (since 6.11) SNP by default: only an explicit "=0" blocks it, and
    # SNP additionally needs a translating IOMMU.
    cmdline_ready = cmdline.get(cmd_key) is not False and not (name == "snp" and iommu_reasons)
    if cpu["vendor"] not in (None, "AuthenticAMD"):
        reasons = ["%s needs an AMD EPYC host; this CPU's vendor is %s" % (label, cpu["vendor"])]
        return _sev_result(supported, enabled, cmdline_ready, devices, reasons)
    reasons = []
    if supported is None:
        reasons.append("cannot tell whether the CPU supports %s: /proc/cpuinfo could not be read" % label)
    elif not supported:
        reasons.append(
            "CPU flag %s absent from /proc/cpuinfo: the CPU or BIOS does not offer %s (enable SME/SEV, "
            "SEV-ES ASIDs%s in the BIOS)" % (flag, label, " and SNP with RMP table" if name == "snp" else "")
        )
    reasons += sev_kvm_reasons(kind, kvm, cmdline, kernel)
    if name != "sev" and enabled and kvm["amd"]["sev"] is not True:
        reasons.append("%s needs SEV itself enabled in kvm_amd (sev parameter is not Y)" % label)
    reasons += iommu_reasons
    reasons += [problem for problem in cmdline.get("problems", []) if "kvm_amd" in problem]
    if devices["sev"] is False:
        reasons.append(
            "/dev/sev is missing: load the ccp driver (`modprobe ccp`) or, in a container, mount the "
            "host's /dev/sev; QEMU needs it to launch %s guests" % label
        )
    return _sev_result(supported, enabled, cmdline_ready, devices, reasons)


def _sev_result(supported, enabled, cmdline_ready, devices, reasons) -> dict:
    return {
        "supported": supported,
        "enabled": enabled,
        "cmdline_ready": cmdline_ready,
        "device": devices["sev"],
        "ready": supported is True and enabled and not reasons,
        "reasons": reasons,
    }


def summarize_sev(cpu, kvm, cmdline, kernel, devices, iommu=None) -> dict:
    """``{"sev": ..., "sev_es": ..., "snp": ...}``; SNP guests charge the ``sev_es`` misc resource."""
    iommu = iommu or {}
    return {kind[0]: _summarize_sev_kind(kind, cpu, kvm, cmdline, kernel, devices, iommu) for kind in SEV_KINDS}


# ---------------------------------------------------------------------------------------------------
# SGX (the TDX quoting enclave needs it)
# ---------------------------------------------------------------------------------------------------


def summarize_sgx(cpu, devices) -> dict:
    supported = cpu["flags"]["sgx"]
    reasons = []
    if supported is None:
        reasons.append("cannot tell whether the CPU supports SGX: /proc/cpuinfo could not be read")
    elif not supported:
        reasons.append("CPU flag sgx absent: enable SGX in the BIOS (TDX attestation needs it for the QE)")
    if supported and not cpu["flags"]["sgx_lc"]:
        reasons.append("CPU flag sgx_lc absent: the in-kernel SGX driver needs Flexible Launch Control")
    if supported and devices["sgx_enclave"] is False:
        reasons.append("/dev/sgx_enclave missing: the kernel's SGX driver did not start (dmesg | grep sgx)")
    return {
        "supported": supported,
        "flexible_launch_control": cpu["flags"]["sgx_lc"],
        "enclave_device": devices["sgx_enclave"],
        "provision_device": devices["sgx_provision"],
        "ready": supported is True and not reasons,
        "reasons": reasons,
    }


# ---------------------------------------------------------------------------------------------------
# A command line before it boots (configured or requested arguments)
# ---------------------------------------------------------------------------------------------------


def cmdline_verdict(cmdline) -> dict:
    """What a command line will mean for TDX and SEV-SNP once booted, from :func:`cmdline.cmdline_facts`.

    ``tdx.reasons`` lists what is missing for TDX, ``snp.reasons`` what would disable SEV-SNP; roles refuse
    or repair a configuration from these, never from their own string matching.
    """
    iommu = cmdline.get("iommu") or {}
    tdx = []
    if cmdline.get("kvm_intel_tdx") is not True:
        tdx.append("kvm_intel.tdx=1 is not set: KVM builds TDs only with the tdx parameter on")
    if not cmdline.get("nohibernate"):
        tdx.append("nohibernate (or hibernate=no) is not set: TDX refuses to initialise while hibernation is possible")
    snp = []
    if iommu.get("passthrough"):
        snp.append(
            "%s makes the IOMMU default domain passthrough, and the AMD IOMMU driver then disables SEV-SNP"
            % " ".join(iommu.get("passthrough_args") or ["the command line"])
        )
    if iommu.get("disabled"):
        snp.append("%s turns the IOMMU off; SEV-SNP requires it" % " ".join(iommu.get("disabled_args") or []))
    if iommu.get("amd_pgtable_v2"):
        snp.append("amd_iommu=pgtbl_v2 selects the v2 page table, with which SEV-SNP is disabled")
    if cmdline.get("kvm_amd_sev_snp") is False:
        snp.append("kvm_amd.sev_snp is false: KVM will not offer SEV-SNP")
    problems = list(cmdline.get("problems") or [])
    return {
        "tdx": {"ready": not tdx, "reasons": tdx},
        "snp": {"ready": not snp, "reasons": snp},
        "problems": problems,
    }


def describe_cmdline(text: str, source: str) -> dict:
    """:func:`cmdline.cmdline_facts` of ``text`` plus its :func:`cmdline_verdict` under ``verdict``."""
    facts = cmdline_facts(text, source=source)
    facts["verdict"] = cmdline_verdict(facts)
    return facts


# ---------------------------------------------------------------------------------------------------
# Post-boot verification: what the host roles promise, checked from the same facts
# ---------------------------------------------------------------------------------------------------


def boot_verdict(facts, vendor=None) -> dict:
    """Whether the host's TEE works after boot, for ``verify_node`` and the roles' ``*_verify`` tasks.

    ``vendor`` (``intel``/``amd``) overrides the detected one. Returns ``ok``, ``vendor``, ``technology``
    and ``reasons`` (empty when ``ok``).
    """
    vendor = vendor or facts.get("tee_vendor")
    tech = tee_registry.of_vendor(vendor)
    if tech is None:
        cpu_vendor = facts.get("cpu", {}).get("vendor") or "unknown (cpuinfo unreadable)"
        return {
            "ok": False,
            "vendor": None,
            "technology": None,
            "reasons": [
                "CPU vendor %s is neither %s: set tee_cpu_vendor" % (cpu_vendor, " nor ".join(tee_registry.CPU_VENDORS))
            ],
        }
    section, technology = facts[tech.short], tech.name
    return {
        "ok": bool(section["ready"]),
        "vendor": vendor,
        "technology": technology,
        "reasons": list(section["reasons"]),
    }
