# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""The kernel command line as the kernel itself reads it: one model for every module and role.

Kernel sources this follows (Linux 6.x):

* ``lib/cmdline.c`` / ``kernel/params.c`` ``next_arg()``: arguments are separated by the C locale's
  ``isspace`` characters outside double quotes; a leading quote, and the first quote after ``=``, are
  dropped together with a closing quote at the very end of the argument; there is no escape character.
  ``parse_args()`` stops at a bare ``--``: what follows belongs to init.
* ``parameq()``: ``-`` and ``_`` are the same character in parameter names (``kvm-intel.tdx`` is
  ``kvm_intel.tdx``, ``intel-iommu=on`` is ``intel_iommu=on``).
* Early parameters (``iommu=``, ``iommu.passthrough=``) and ``__setup`` handlers run once per occurrence,
  in order, so the last occurrence that sets a thing wins and *every* occurrence is processed.
  ``__setup`` names match as prefixes (``nohibernate`` also matches ``nohibernate=0``).
* ``arch/x86/kernel/pci-dma.c`` ``iommu_setup()``: a comma-separated option list matched by prefix
  (``pt``, ``nopt``, ``off``, ...); ``usedac`` stops the walk. ``drivers/iommu/iommu.c``:
  ``iommu.passthrough=<bool>``. ``drivers/iommu/amd/init.c``: ``amd_iommu=`` options (``off``,
  ``pgtbl_v2``, ...) and ``iommu_snp_enable()``, which disables SEV-SNP when the IOMMU is off, the
  default domain is passthrough, or the v2 page table is selected.
* ``kernel/power/hibernate.c``: ``nohibernate`` and ``hibernate=no...`` make hibernation unavailable,
  which the TDX host code requires.
* ``lib/kstrtox.c`` ``kstrtobool()`` for boolean module parameters; a bare ``kvm_intel.tdx`` means true.

Pure Python, standard library only.
"""

from __future__ import annotations

from ansible_collections.confidential.tee.plugins.module_utils.common.record import Record

# The kernel's ctype table (lib/ctype.c) marks these as space, including Latin-1 NBSP (0xA0).
KERNEL_SPACE = frozenset(" \t\n\v\f\r\xa0")
INIT_SEPARATOR = "--"


class Arg(Record):
    """One argument: ``raw`` as written (quotes included) and ``name``/``value`` as the kernel sees them."""

    __slots__ = ("end", "name", "raw", "start", "value")

    def __init__(self, raw: str, name: str, value: str | None, start: int = 0, end: int = 0) -> None:
        self.raw, self.name, self.value, self.start, self.end = raw, name, value, start, end

    @property
    def key(self) -> str:
        """The name as ``parameq`` compares it: dashes and underscores alike."""
        return param_key(self.name)

    @property
    def ends_kernel_args(self) -> bool:
        return self.value is None and self.name == INIT_SEPARATOR

    def same_setting(self, other: Arg) -> bool:
        return self.key == other.key and self.value == other.value

    def __str__(self) -> str:
        return self.raw


def param_key(name: str) -> str:
    return name.replace("-", "_")


def _next_arg(text: str, pos: int) -> tuple[Arg, int]:
    """One step of the kernel's ``next_arg()`` from ``pos`` (which is not a space)."""
    start = pos
    quoted = text[pos] == '"'
    if quoted:
        pos += 1
    in_quote = quoted
    equals = 0
    i = 0
    n = len(text) - pos
    while i < n:
        char = text[pos + i]
        if char in KERNEL_SPACE and not in_quote:
            break
        # The kernel keeps looking while equals is 0, so a leading "=" does not count as the separator.
        if equals == 0 and char == "=":
            equals = i
        if char == '"':
            in_quote = not in_quote
        i += 1
    body = text[pos : pos + i]
    chars = list(body)
    cut = len(chars)  # where the kernel writes its terminating NUL(s)
    if equals:
        value_start = equals + 1
        if value_start < len(chars) and chars[value_start] == '"':
            value_start += 1
            if i > 0 and body[i - 1] == '"':
                cut = i - 1
        if quoted and i > 0 and body[i - 1] == '"' and cut == len(chars):
            cut = i - 1
        name = body[:equals]
        value = body[value_start:cut] if value_start <= cut else ""
    else:
        if quoted and i > 0 and body[i - 1] == '"':
            cut = i - 1
        name, value = body[:cut], None
    end = pos + i
    return Arg(text[start:end], name, value, start, end), end


def tokenize(text: str) -> list[Arg]:
    """Every argument of ``text`` in order, with spans into ``text`` (init arguments included)."""
    args: list[Arg] = []
    pos, n = 0, len(text)
    while pos < n:
        if text[pos] in KERNEL_SPACE:
            pos += 1
            continue
        arg, pos = _next_arg(text, pos)
        args.append(arg)
    return args


def parse_arg_text(text: str) -> Arg:
    """A single argument written on its own (``name`` or ``name=value``)."""
    found = tokenize(text)
    return found[0] if found else Arg(text, text, None)


def kernel_args(args: list[Arg]) -> list[Arg]:
    """The arguments the kernel parses: everything before a bare ``--``."""
    for index, arg in enumerate(args):
        if arg.ends_kernel_args:
            return args[:index]
    return args


def kernel_bool(value: str | None) -> bool | None:
    """``kstrtobool()``; ``None`` (a bare parameter) means true, an unparsable value is ``None``."""
    if value is None:
        return True
    first, second = value[:1], value[1:2]
    if first and first in "yYtT1":
        return True
    if first and first in "nNfF0":
        return False
    if first and first in "oO" and second:
        if second in "nN":
            return True
        if second in "fF":
            return False
    return None


def _options(value: str | None) -> list[str]:
    return [] if not value else [option for option in value.split(",") if option]


# ---------------------------------------------------------------------------------------------------
# What the kernel makes of the arguments (each function one handler, in the kernel's order)
# ---------------------------------------------------------------------------------------------------


class ParamFinding(Record):
    """The effective value of one setting and the arguments that decided it, in order."""

    __slots__ = ("args", "problems", "value")
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, value: bool | None = None, args: list[str] | None = None, problems: list[str] | None = None):
        self.value = value
        self.args = [] if args is None else args
        self.problems = [] if problems is None else problems

    def as_dict(self) -> dict:
        return {"value": self.value, "args": list(self.args), "problems": list(self.problems)}


def module_bool(args: list[Arg], key: str) -> ParamFinding:
    """A boolean module parameter (``kvm_intel.tdx``): the last valid occurrence wins.

    An invalid value is a problem: a built-in module ignores that occurrence, a loadable one refuses to
    load at all, so the effective value cannot be predicted.
    """
    finding = ParamFinding()
    wanted = param_key(key)
    for arg in kernel_args(args):
        if arg.key != wanted:
            continue
        finding.args.append(arg.raw)
        value = kernel_bool(arg.value)
        if value is None:
            finding.problems.append(
                f"{arg.raw}: {arg.value!r} is not a boolean the kernel accepts (y/n, 1/0, on/off, true/false); "
                f"a modular {key.split('.')[0]} refuses to load with it"
            )
            finding.value = None
            continue
        finding.value = value
    return finding


def hibernation_disabled(args: list[Arg]) -> ParamFinding:
    """``nohibernate`` (any argument starting with it) or ``hibernate=no...`` (not noresume/nocompress)."""
    finding = ParamFinding(value=False)
    for arg in kernel_args(args):
        if arg.key.startswith("nohibernate"):
            finding.value = True
            finding.args.append(arg.raw)
        elif arg.key == "hibernate" and arg.value is not None:
            option = arg.value
            if option.startswith("no") and not option.startswith(("noresume", "nocompress")):
                finding.value = True
                finding.args.append(arg.raw)
    return finding


class IommuFinding(Record):
    """What the IOMMU-related early parameters and ``__setup`` handlers make of the command line.

    ``passthrough`` is ``None`` when the command line does not set it (the kernel's build default applies)."""

    __slots__ = (
        "amd_pgtable_args",
        "amd_pgtable_v2",
        "disabled",
        "disabled_args",
        "intel_iommu",
        "passthrough",
        "passthrough_args",
    )
    __hash__ = None  # type: ignore[assignment]

    def __init__(self) -> None:
        self.passthrough: bool | None = None
        self.passthrough_args: list[str] = []
        self.disabled = False
        self.disabled_args: list[str] = []
        self.intel_iommu: bool | None = None
        self.amd_pgtable_v2 = False
        self.amd_pgtable_args: list[str] = []

    def as_dict(self) -> dict:
        return {
            "passthrough": self.passthrough,
            "passthrough_args": list(self.passthrough_args),
            "disabled": self.disabled,
            "disabled_args": list(self.disabled_args),
            "intel_iommu_on": self.intel_iommu is True,
            "amd_pgtable_v2": self.amd_pgtable_v2,
        }


def _iommu_options(finding: IommuFinding, arg: Arg) -> None:
    for option in _options(arg.value):
        # Prefix matches, as iommu_setup() uses strncmp(); "usedac" returns from the walk.
        if option.startswith("nopt"):
            _set_passthrough(finding, arg, False)
        elif option.startswith("pt"):
            _set_passthrough(finding, arg, True)
        if option.startswith("off"):
            finding.disabled = True
            finding.disabled_args.append(arg.raw)
        if option.startswith("usedac"):
            return


def _set_passthrough(finding: IommuFinding, arg: Arg, value: bool) -> None:
    finding.passthrough = value
    if arg.raw not in finding.passthrough_args:
        finding.passthrough_args.append(arg.raw)


# Options each driver's parser knows (drivers/iommu/amd/init.c, drivers/iommu/intel/iommu.c, prefix-matched
# like strncmp); anything else is logged by the kernel as "Unknown option" and ignored.
KNOWN_VENDOR_OPTIONS = {
    "amd_iommu": (
        "fullflush",
        "force_enable",
        "off",
        "force_isolation",
        "pgtbl_v1",
        "pgtbl_v2",
        "irtcachedis",
        "nohugepages",
        "v2_pgsizes_only",
    ),
    "intel_iommu": ("on", "off", "igfx_off", "forcedac", "strict", "sp_off", "sm_on", "sm_off", "tboot_noforce"),
}


def unknown_vendor_options(args: list[Arg]) -> list[str]:
    """Problems for ``amd_iommu=``/``intel_iommu=`` options the kernel would log as unknown and ignore."""
    problems = []
    for arg in kernel_args(args):
        known = KNOWN_VENDOR_OPTIONS.get(arg.key)
        if known is None or arg.value is None:
            continue
        for option in _options(arg.value):
            if not option.startswith(known):
                problems.append(
                    f"{arg.raw}: {option!r} is not an option of {arg.key} (the kernel logs 'Unknown option' and "
                    f"ignores it); known: {', '.join(known)}"
                )
    return problems


def _vendor_iommu_options(finding: IommuFinding, arg: Arg) -> None:
    for option in _options(arg.value):
        if option.startswith("off"):
            finding.disabled = True
            finding.disabled_args.append(arg.raw)
            if arg.key == "intel_iommu":
                finding.intel_iommu = False
        elif arg.key == "intel_iommu" and option.startswith("on"):
            finding.intel_iommu = True
        elif arg.key == "amd_iommu" and option.startswith(("pgtbl_v1", "pgtbl_v2")):
            finding.amd_pgtable_v2 = option.startswith("pgtbl_v2")
            finding.amd_pgtable_args.append(arg.raw)


def iommu(args: list[Arg]) -> IommuFinding:
    finding = IommuFinding()
    for arg in kernel_args(args):
        if arg.key == "iommu" and arg.value is not None:
            _iommu_options(finding, arg)
        elif arg.key == "iommu.passthrough" and arg.value is not None:
            value = kernel_bool(arg.value)
            if value is not None:
                _set_passthrough(finding, arg, value)
        elif arg.key in ("intel_iommu", "amd_iommu") and arg.value is not None:
            _vendor_iommu_options(finding, arg)
    return finding


def passthrough_remedy(args: list[Arg]) -> dict:
    """The smallest change that leaves the IOMMU default domain translated, for ``kernel_cmdline``.

    Every ``iommu=`` argument that selects passthrough is removed and its other options are kept in one
    ``iommu=`` argument (``iommu=pt,nomerge`` becomes ``iommu=nomerge``); ``iommu.passthrough`` set true
    is removed. ``present``/``absent`` are the lists to hand to ``kernel_cmdline``.
    """
    finding = iommu(args)
    if not finding.passthrough:
        return {"needed": False, "present": [], "absent": []}
    absent: list[str] = []
    kept: list[str] = []
    for arg in kernel_args(args):
        if arg.key == "iommu" and arg.value is not None:
            options = _options(arg.value)
            if any(option.startswith("pt") for option in options):
                absent.append(arg.raw)
            kept += [option for option in options if not option.startswith("pt") and option not in kept]
        elif arg.key == "iommu.passthrough" and kernel_bool(arg.value):
            absent.append(arg.raw)
    present = ["iommu=" + ",".join(kept)] if kept and absent else []
    return {"needed": True, "present": present, "absent": list(dict.fromkeys(absent))}


MODULE_BOOLS = ("kvm_intel.tdx", "kvm_amd.sev", "kvm_amd.sev_es", "kvm_amd.sev_snp")
# Arguments worth reporting; the rest of the line (root=, network-boot credentials...) is never returned.
RELEVANT = (
    "nohibernate",
    "hibernate",
    "kvm_intel.tdx",
    "kvm_amd.sev",
    "kvm_amd.sev_es",
    "kvm_amd.sev_snp",
    "intel_iommu",
    "amd_iommu",
    "iommu",
    "iommu.passthrough",
    "mem_encrypt",
)


def relevant_args(args: list[Arg]) -> list[str]:
    keys = {param_key(name) for name in RELEVANT}
    return [arg.raw for arg in kernel_args(args) if arg.key in keys or arg.key.startswith("nohibernate")]


def cmdline_facts(text: str | None, source: str | None = None) -> dict:
    """The TEE and IOMMU meaning of a command line, for ``tee_host_info`` and ``kernel_cmdline``.

    ``text`` ``None`` means the line could not be read: every value is then unknown (``None``).
    """
    if text is None:
        return _unknown_facts(source)
    args = tokenize(text)
    modules = {key: module_bool(args, key) for key in MODULE_BOOLS}
    found = iommu(args)
    hibernation = hibernation_disabled(args)
    mem_encrypt = [arg.value for arg in kernel_args(args) if arg.key == "mem_encrypt" and arg.value is not None]
    problems = [problem for finding in modules.values() for problem in finding.problems]
    problems += unknown_vendor_options(args)
    return {
        "readable": True,
        "source": source,
        "nohibernate": bool(hibernation.value),
        "nohibernate_args": hibernation.args,
        "kvm_intel_tdx": modules["kvm_intel.tdx"].value,
        "kvm_amd_sev": modules["kvm_amd.sev"].value,
        "kvm_amd_sev_es": modules["kvm_amd.sev_es"].value,
        "kvm_amd_sev_snp": modules["kvm_amd.sev_snp"].value,
        "intel_iommu_on": found.intel_iommu is True,
        "iommu_off": found.disabled,
        "iommu_pt": found.passthrough is True,
        "iommu": found.as_dict(),
        "iommu_passthrough_remedy": passthrough_remedy(args),
        "mem_encrypt": None if not mem_encrypt else mem_encrypt[-1].strip().lower() == "on",
        "args": relevant_args(args),
        "init_args_present": len(kernel_args(args)) != len(args),
        "problems": problems,
    }


def _unknown_facts(source: str | None) -> dict:
    return {
        "readable": False,
        "source": source,
        "nohibernate": None,
        "nohibernate_args": [],
        "kvm_intel_tdx": None,
        "kvm_amd_sev": None,
        "kvm_amd_sev_es": None,
        "kvm_amd_sev_snp": None,
        "intel_iommu_on": None,
        "iommu_off": None,
        "iommu_pt": None,
        "iommu": IommuFinding().as_dict() | {"passthrough": None, "disabled": None, "intel_iommu_on": None},
        "iommu_passthrough_remedy": {"needed": None, "present": [], "absent": []},
        "mem_encrypt": None,
        "args": [],
        "init_args_present": None,
        "problems": [],
    }
