# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""Validation rules for TEE capacity, with messages an operator can act on at 3 a.m.

Pure Python over :mod:`misc_cgroup`; the ``tee_capacity_check`` module is a thin wrapper.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ansible_collections.confidential.tee.plugins.module_utils.common.results import FAIL, PASS, check_record
from ansible_collections.confidential.tee.plugins.module_utils.host.misc_cgroup import (
    MiscState,
    canonical_resource,
)

# Why a resource can have capacity 0 (the kernel then omits its line) and where to look.
ZERO_CAPACITY_HINTS = {
    "tdx": (
        "TDX not initialised; check `dmesg | grep -i tdx` (6.x: 'virt/tdx: module initialized' when kvm_intel "
        "loads; 7.1+: 'virt/tdx: TDX-Module initialized' at boot), that TDX and a TME-MT/TDX key split are enabled "
        "in the BIOS, that kvm_intel is loaded with tdx=Y (kernel arguments `kvm_intel.tdx=1 nohibernate`), "
        "and that the kernel is >= 6.16 or carries the TDX misc-cgroup patch"
    ),
    "sev": (
        "SEV not initialised; check `dmesg | grep -i sev`, that SEV and SME are enabled in the BIOS, "
        "that kvm_amd is loaded with sev=1, and that /dev/sev exists (ccp module, PSP firmware)"
    ),
    "sev_es": (
        "no SEV-ES/SEV-SNP ASIDs (SNP guests charge sev_es); check `dmesg | grep -i sev`, the BIOS "
        "'SEV-ES ASID Space Limit' (sev_es capacity = limit - 1, so it must be > 1), that kvm_amd is loaded "
        "with sev_es=1 (and sev_snp=1 for SNP), and that `iommu=pt` is not on the kernel command line on SNP hosts"
    ),
}


# What a launch looks like when the keys are gone, so operators recognise it in QEMU/libvirt/Kata logs:
# * TDX: KVM allocates the HKID (an IDA over the guest KeyIDs) before the misc charge (Linux 6.16-7.x
#   arch/x86/kvm/vmx/tdx.c __tdx_td_init), so exhaustion is -ENOSPC from the KVM_TDX_INIT_VM ioctl, which QEMU
#   reports as "KVM_TDX_INIT_VM failed: No space left on device" (target/i386/kvm/tdx.c); a cgroup's misc.max
#   refuses the later misc charge with -EBUSY.
# * SEV/SEV-ES/SNP: the misc charge, then the ASID bitmap (arch/x86/kvm/svm/sev.c sev_asid_new) both fail -EBUSY,
#   which QEMU prints as "failed to initialize ret=-16 fw_error=0" (target/i386/sev.c); with ciphertext hiding
#   (6.18+) an SEV-ES guest without an ASID range gets -ENOTTY (ret=-25).
EXHAUSTION_SIGNATURES = {
    "tdx": (
        "a TD launch then fails in KVM_TDX_INIT_VM with ENOSPC (QEMU: 'KVM_TDX_INIT_VM failed: No space left on "
        "device') when the host's TDX KeyIDs are gone, or with EBUSY ('Device or resource busy') at a cgroup's "
        "misc.max"
    ),
    "sev": (
        "an SEV launch then fails with EBUSY (QEMU: 'failed to initialize ret=-16 fw_error=0'), whether the ASIDs "
        "or a cgroup's misc.max ran out"
    ),
    "sev_es": (
        "an SEV-ES/SNP launch then fails with EBUSY (QEMU: 'failed to initialize ret=-16 fw_error=0'), whether the "
        "ASIDs, the SNP range of ciphertext hiding or a cgroup's misc.max ran out; an SEV-ES guest whose range "
        "ciphertext hiding emptied fails with ENOTTY (ret=-25)"
    ),
}


def _problems(state: MiscState, filename: str) -> list[str]:
    return [issue.describe() for issue in state.issues if issue.path.rsplit("/", 1)[-1] == filename]


@dataclass
class CheckResult:
    name: str
    ok: bool
    message: str

    def as_dict(self) -> dict:
        """The collection's check record: PASS or FAIL (a capacity check never skips), no fix of its own."""
        return check_record(self.name, PASS if self.ok else FAIL, self.message)


@dataclass
class CheckReport:
    resource: str
    capacity: int | None = None
    current: int | None = None
    free: int | None = None
    current_is_lower_bound: bool = False
    checks: list[CheckResult] = field(default_factory=list)
    # AMD ciphertext hiding: the SNP range 1..N within the joint sev_es count (None: no split or not asked).
    snp_asids: int | None = None

    @property
    def ok(self) -> bool:
        return all(check.ok for check in self.checks)

    @property
    def failures(self) -> list[CheckResult]:
        return [check for check in self.checks if not check.ok]

    def add(self, name: str, ok: bool, message: str) -> None:
        self.checks.append(CheckResult(name, ok, message))


def evaluate(
    state: MiscState,
    resource: str,
    *,
    min_capacity: int = 1,
    min_free: int | None = None,
    max_utilization: float | None = None,
    expected_capacity: int | None = None,
    snp_asids: int | None = None,
) -> CheckReport:
    """Run every requested check; a check that cannot be evaluated fails and says why.

    ``snp_asids`` is the SNP range of AMD ciphertext hiding (:mod:`sev_asids`), given when SNP capacity was
    asked for: ``misc.capacity``/``misc.current`` count SEV-ES and SNP together, so SNP's capacity is at most N
    and its free keys at most ``min(free, N)`` (SEV-ES guests' share of ``misc.current`` cannot be told apart).
    """
    name = canonical_resource(resource)
    label = name if name == resource else f"{name} (asked as {resource})"
    if snp_asids is not None:
        label += f", SNP ASIDs 1..{snp_asids} of ciphertext hiding"
    report = CheckReport(resource=name)
    layout = state.layout
    if not layout.present:
        kernel_fix = (
            ""
            if layout.not_root
            else " Boot a kernel with CONFIG_CGROUP_MISC (5.13+ for sev/sev_es, 6.16+ or a vendor backport for tdx)"
            f"; or, when this runs in a container, {layout.host_root} is not the host's root: set host_root to the"
            " host's mount (for example /host) or pass capacity, the registered tee_capacity_info result."
        )
        report.add("misc_controller", False, f"cannot count {label} keys: {layout.reason}.{kernel_fix}")
        return report

    entry = state.entry(name)
    where = layout.directory
    capacity = entry.capacity
    if capacity is None:
        report.add(
            "capacity_readable",
            False,
            f"the {label} capacity in {where}/misc.capacity is unknown, so no check can pass: "
            + "; ".join(_problems(state, "misc.capacity") or ["no usable value"])
            + ". Fix or remount the file; a kernel writes it as '<name> <count>' lines",
        )
        return report
    report.capacity = capacity
    report.current = entry.current
    report.free = entry.free
    report.current_is_lower_bound = entry.current_is_lower_bound
    if snp_asids is not None:
        report.snp_asids = snp_asids
        report.capacity = min(capacity, snp_asids)
        report.free = None if entry.free is None else min(entry.free, report.capacity)

    _capacity_checks(report, label, where, min_capacity, expected_capacity)
    wants_usage = min_free is not None or max_utilization is not None
    if wants_usage and entry.current is None:
        report.add(
            "usage_readable",
            False,
            f"the {label} usage in {where}/misc.current is unknown, so free keys cannot be counted: "
            + "; ".join(_problems(state, "misc.current") or ["no usable value"]),
        )
        return report
    _usage_checks(report, label, where, min_free, max_utilization)
    return report


def _capacity_checks(report: CheckReport, label: str, where: str, min_capacity: int, expected_capacity) -> None:
    name, capacity = report.resource, report.capacity
    if capacity < min_capacity:
        hint = (
            ZERO_CAPACITY_HINTS.get(name, "the kernel reports no capacity for it")
            if capacity == 0
            else ("the BIOS key/ASID split or kernel configuration provides fewer than required")
        )
        report.add(
            "min_capacity",
            False,
            f"{label} capacity {capacity} in {where}/misc.capacity, at least {min_capacity} required: {hint}.",
        )
    else:
        report.add("min_capacity", True, f"{label} capacity {capacity} >= {min_capacity}")

    if expected_capacity is not None:
        ok = capacity == expected_capacity
        report.add(
            "expected_capacity",
            ok,
            f"{label} capacity {capacity} matches the expected {expected_capacity}"
            if ok
            else (
                f"{label} capacity is {capacity} in {where}/misc.capacity but {expected_capacity} was expected: "
                "the BIOS key/ASID split, the firmware or the kernel changed since the expectation was recorded "
                "(TDX capacity is the number of TDX KeyIDs minus one)."
            ),
        )


def _usage_checks(report: CheckReport, label: str, where: str, min_free, max_utilization) -> None:
    capacity, current, free = report.capacity, report.current, report.free
    bound = (
        " (usage is a lower bound summed from child cgroups on this kernel, so free keys may be fewer)"
        if report.current_is_lower_bound
        else ""
    )
    if min_free is not None:
        ok = free >= min_free
        report.add(
            "min_free",
            ok,
            f"{label}: {free} of {capacity} keys free >= {min_free}{bound}"
            if ok
            else (
                f"{label}: only {free} of {capacity} keys free in {where} (misc.current {current}), at least "
                f"{min_free} required{bound}: stop unused guests or move this workload to another node; "
                f"{EXHAUSTION_SIGNATURES.get(report.resource, 'launches past the capacity fail')}."
            ),
        )
    if max_utilization is not None:
        utilization = 100.0 if capacity == 0 else round(100.0 * current / capacity, 2)
        ok = utilization <= max_utilization
        report.add(
            "max_utilization",
            ok,
            f"{label}: utilization {utilization}% <= {max_utilization}%{bound}"
            if ok
            else (
                f"{label}: utilization {utilization}% ({current} of {capacity} keys) in {where} exceeds "
                f"{max_utilization}%{bound}: the node is close to running out of TEE keys."
            ),
        )
