# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""The misc cgroup controller's files, read exactly as the kernel writes them.

Pure Python, standard library only: Ansible modules (through AnsiballZ) and the ``teesim``
simulator import this same file.

Kernel facts this follows (``kernel/cgroup/misc.c``, ``arch/x86/kvm/svm/sev.c``,
``arch/x86/kvm/vmx/tdx.c``):

* ``misc.capacity`` exists on the root cgroup only and prints ``"%s %lu\\n"`` for every resource whose
  capacity is non-zero, so the file may be empty.
* ``misc.current`` and ``misc.peak`` print ``"%s %lld\\n"`` for every resource with a capacity or a
  non-zero value. Kernels before the root ``misc.current`` was exposed have it on children only; the
  root usage is then the sum of the top-level children, a lower bound (charges made from the root
  cgroup itself are invisible).
* ``misc.max`` exists on children only; ``max`` stands for "no limit" (U64_MAX).
* ``misc.events`` / ``misc.events.local`` exist on children only, lines ``"<res>.max %llu"``.
* Resource names: ``sev``, ``sev_es``, ``tdx``. SEV-ES *and* SEV-SNP guests charge ``sev_es``; there is
  no ``snp`` resource. TDX capacity is the number of TDX KeyIDs minus one (the TDX module's global KeyID).
* cgroup v2 keeps the files in ``/sys/fs/cgroup``; cgroup v1 mounts the controller at
  ``/sys/fs/cgroup/misc``.

Nothing here raises on bad input: every oddity becomes a :class:`ParseIssue` and the affected value
becomes ``None`` (unknown), never a guessed number.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

KNOWN_RESOURCES = ("sev", "sev_es", "tdx")
# SEV-SNP guests are charged to the SEV-ES ASID pool; users still think of them as "snp".
RESOURCE_ALIASES = {"snp": "sev_es", "sev_snp": "sev_es"}
U64_MAX = (1 << 64) - 1
S64_MAX = (1 << 63) - 1
MAX_FILE_BYTES = 64 * 1024

CGROUP_V2 = 2
CGROUP_V1 = 1

SOURCE_ROOT = "root"
SOURCE_CHILDREN_SUM = "children_sum"
SOURCE_UNAVAILABLE = "unavailable"

_NAME_RE = re.compile(r"^[a-z0-9_]+$")
_DIGITS_RE = re.compile(r"^[0-9]+$")


@dataclass(frozen=True)
class ParseIssue:
    """One thing wrong with one file (or one line of it)."""

    path: str
    problem: str
    line_number: int | None = None
    line: str | None = None

    def describe(self) -> str:
        where = self.path if self.line_number is None else f"{self.path}:{self.line_number}"
        shown = "" if self.line is None else f" (line: {self.line!r})"
        return f"{where}: {self.problem}{shown}"

    def as_dict(self) -> dict:
        return {
            "path": self.path,
            "line_number": self.line_number,
            "line": self.line,
            "problem": self.problem,
        }


@dataclass
class MiscFile:
    """A parsed misc file: ``values`` maps names to integers, ``None`` where the value is unknown."""

    path: str
    exists: bool = True
    values: dict[str, int | None] = field(default_factory=dict)
    issues: list[ParseIssue] = field(default_factory=list)

    @property
    def readable(self) -> bool:
        return self.exists and not any(i.line_number is None for i in self.issues)


def canonical_resource(name: str) -> str:
    """Map user spellings (``snp``) to the kernel's resource name (``sev_es``)."""
    return RESOURCE_ALIASES.get(name, name)


def _parse_value(token: str, allow_max: bool, signed: bool) -> tuple[int | None, str | None]:
    if token == "max":
        if allow_max:
            return U64_MAX, None
        return None, "the word 'max' is only valid in misc.max"
    negative = token.startswith("-")
    digits = token[1:] if negative else token
    if not _DIGITS_RE.match(digits):
        return None, f"value {token!r} is not a decimal integer"
    value = int(digits)
    if negative and (value != 0 or not signed):
        return (
            None,
            f"negative value {token}: the kernel never prints one here (its accounting is inconsistent)",
        )
    limit = S64_MAX if signed else U64_MAX
    if value > limit:
        return None, f"value {value} exceeds the kernel's {'s64' if signed else 'u64'} range"
    return value, None


def parse_misc_text(
    data: bytes | str,
    path: str = "<text>",
    *,
    allow_max: bool = False,
    signed: bool = False,
    suffix: str = "",
) -> MiscFile:
    """Parse the text of one misc file.

    ``suffix`` is the part after the resource name in the key (``.max`` in ``misc.events``), stripped
    from the returned names. ``signed`` accepts the ``%lld`` form (a lone ``-0`` is 0; any other
    negative number is reported, not returned).
    """
    result = MiscFile(path=path)
    if isinstance(data, bytes):
        try:
            text = data.decode("ascii")
        except UnicodeDecodeError:
            result.issues.append(ParseIssue(path, "file is not ASCII text; is this really a misc cgroup file?"))
            return result
    else:
        text = data
    if "\x00" in text:
        result.issues.append(ParseIssue(path, "file contains NUL bytes; is this really a misc cgroup file?"))
        return result

    seen_lines: dict[str, int] = {}
    conflicting: set[str] = set()
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.strip()
        if not line:
            continue
        fields = line.split()
        if len(fields) != 2:
            result.issues.append(ParseIssue(path, "expected '<name> <value>'", number, raw))
            continue
        key, token = fields
        if suffix:
            if not key.endswith(suffix):
                result.issues.append(ParseIssue(path, f"expected a key ending in {suffix!r}", number, raw))
                continue
            key = key[: -len(suffix)]
        if not _NAME_RE.match(key):
            result.issues.append(ParseIssue(path, f"resource name {key!r} is not a kernel identifier", number, raw))
            continue
        value, problem = _parse_value(token, allow_max, signed)
        if problem:
            result.issues.append(ParseIssue(path, problem, number, raw))
            # Known-bad beats absent: a later reader must not mistake "unparsable" for "no line".
            result.values[key] = None
            continue
        if key in seen_lines:
            previous = result.values.get(key)
            if previous != value:
                conflicting.add(key)
                result.issues.append(
                    ParseIssue(path, f"duplicate line for {key!r} with a different value", number, raw)
                )
            else:
                result.issues.append(ParseIssue(path, f"duplicate line for {key!r}", number, raw))
            continue
        seen_lines[key] = number
        result.values[key] = value
    for key in conflicting:
        result.values[key] = None
    return result


def read_misc_file(
    path: str, *, allow_max: bool = False, signed: bool = False, suffix: str = "", missing_ok: bool = True
) -> MiscFile:
    """Read and parse one file; a missing file is ``exists=False``, an unreadable one an issue."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        result = MiscFile(path=path, exists=False)
        if not missing_ok:
            result.issues.append(ParseIssue(path, "file does not exist"))
        return result
    except IsADirectoryError:
        return MiscFile(path=path, issues=[ParseIssue(path, "is a directory, expected a file")])
    except OSError as exc:
        return MiscFile(path=path, issues=[ParseIssue(path, f"cannot read: {exc.strerror or exc}")])
    if len(data) > MAX_FILE_BYTES:
        return MiscFile(path=path, issues=[ParseIssue(path, f"larger than {MAX_FILE_BYTES} bytes; not a misc file")])
    return parse_misc_text(data, path, allow_max=allow_max, signed=signed, suffix=suffix)


@dataclass
class MiscLayout:
    """Where the misc controller's root files are, or why there are none."""

    host_root: str
    cgroup_version: int | None
    directory: str | None
    reason: str | None = None

    @property
    def present(self) -> bool:
        return self.directory is not None


def _join(host_root: str, *parts: str) -> str:
    return os.path.join(host_root, *(p.lstrip("/") for p in parts))


def locate_misc(host_root: str = "/") -> MiscLayout:
    """Find the misc controller under ``host_root`` (v2 unified hierarchy first, then v1)."""
    v2 = _join(host_root, "sys/fs/cgroup")
    v1 = _join(host_root, "sys/fs/cgroup/misc")
    if os.path.exists(os.path.join(v2, "misc.capacity")):
        return MiscLayout(host_root, CGROUP_V2, v2)
    if os.path.exists(os.path.join(v1, "misc.capacity")):
        return MiscLayout(host_root, CGROUP_V1, v1)
    if not os.path.isdir(v2):
        reason = f"{v2} does not exist: no cgroup filesystem is mounted under host_root {host_root!r}"
    else:
        controllers_path = os.path.join(v2, "cgroup.controllers")
        controllers = None
        try:
            with open(controllers_path, encoding="ascii", errors="replace") as handle:
                controllers = handle.read().split()
        except OSError:
            pass
        if controllers is not None and "misc" not in controllers:
            reason = (
                f"the misc cgroup controller is not available ({controllers_path} lists "
                f"{' '.join(controllers) or 'nothing'}): the kernel lacks CONFIG_CGROUP_MISC or is older than 5.13"
            )
        else:
            reason = (
                f"no misc.capacity in {v2} (cgroup v2) or {v1} (cgroup v1): the kernel lacks CONFIG_CGROUP_MISC, "
                "or the misc controller is not mounted"
            )
    return MiscLayout(host_root, None, None, reason)


@dataclass
class ResourceState:
    """Capacity and usage of one misc resource on the whole host."""

    name: str
    capacity: int | None
    current: int | None
    current_source: str
    peak: int | None = None
    known: bool = True

    @property
    def current_is_lower_bound(self) -> bool:
        return self.current_source == SOURCE_CHILDREN_SUM

    @property
    def free(self) -> int | None:
        if self.capacity is None or self.current is None:
            return None
        return max(self.capacity - self.current, 0)

    @property
    def utilization(self) -> float | None:
        if self.capacity in (None, 0) or self.current is None:
            return None
        return round(100.0 * self.current / self.capacity, 2)

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "known": self.known,
            "capacity": self.capacity,
            "current": self.current,
            "current_source": self.current_source,
            "current_is_lower_bound": self.current_is_lower_bound,
            "free": self.free,
            "free_is_upper_bound": self.current_is_lower_bound and self.free is not None,
            "peak": self.peak,
            "utilization": self.utilization,
        }


@dataclass
class CgroupState:
    """The misc files of one child cgroup (path relative to the controller root)."""

    path: str
    current: dict[str, int | None]
    max: dict[str, int | None]
    peak: dict[str, int | None]
    events: dict[str, int | None]
    events_local: dict[str, int | None]

    def as_dict(self) -> dict:
        limits = {k: ("max" if v == U64_MAX else v) for k, v in self.max.items()}
        return {
            "path": self.path,
            "current": self.current,
            "max": limits,
            "peak": self.peak,
            "events": self.events,
            "events_local": self.events_local,
        }


@dataclass
class MiscState:
    """Everything read from one host's misc controller."""

    layout: MiscLayout
    resources: dict[str, ResourceState] = field(default_factory=dict)
    issues: list[ParseIssue] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    cgroups: list[CgroupState] = field(default_factory=list)
    # Where usage came from: root misc.current, the children's sum (old kernels), or nowhere.
    usage_source: str = SOURCE_UNAVAILABLE

    @property
    def unknown_resources(self) -> list[str]:
        return sorted(name for name, state in self.resources.items() if not state.known)

    def resource(self, name: str) -> ResourceState | None:
        return self.resources.get(canonical_resource(name))


def _child_dirs(directory: str) -> list[str]:
    try:
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
    except OSError:
        return []
    return [e.path for e in entries if e.is_dir(follow_symlinks=False)]


def _sum_children_current(directory: str, issues: list[ParseIssue]) -> tuple[dict[str, int | None], int]:
    totals: dict[str, int | None] = {}
    counted = 0
    for child in _child_dirs(directory):
        parsed = read_misc_file(os.path.join(child, "misc.current"), signed=True)
        if not parsed.exists:
            continue
        counted += 1
        issues.extend(parsed.issues)
        for name, value in parsed.values.items():
            if value is None or totals.get(name, 0) is None:
                totals[name] = None
            else:
                totals[name] = totals.get(name, 0) + value
    return totals, counted


def _walk_cgroups(directory: str, max_depth: int, issues: list[ParseIssue]) -> list[CgroupState]:
    found: list[CgroupState] = []
    stack = [(child, 1) for child in reversed(_child_dirs(directory))]
    while stack:
        path, depth = stack.pop()
        files = {
            "current": read_misc_file(os.path.join(path, "misc.current"), signed=True),
            "max": read_misc_file(os.path.join(path, "misc.max"), allow_max=True),
            "peak": read_misc_file(os.path.join(path, "misc.peak"), signed=True),
            "events": read_misc_file(os.path.join(path, "misc.events"), suffix=".max"),
            "events_local": read_misc_file(os.path.join(path, "misc.events.local"), suffix=".max"),
        }
        if files["current"].exists or files["max"].exists:
            for parsed in files.values():
                issues.extend(parsed.issues)
            found.append(CgroupState(path=os.path.relpath(path, directory), **{k: v.values for k, v in files.items()}))
        if depth < max_depth:
            stack.extend((child, depth + 1) for child in reversed(_child_dirs(path)))
    return found


def read_misc_state(host_root: str = "/", *, include_cgroups: bool = False, cgroup_depth: int = 3) -> MiscState:
    """Read capacity, usage and peaks of every misc resource under ``host_root``.

    With no misc controller the result has ``layout.present == False`` and ``layout.reason`` says
    why; it is the caller's choice whether that is an error.
    """
    layout = locate_misc(host_root)
    state = MiscState(layout=layout)
    if not layout.present:
        return state
    directory = layout.directory
    capacity = read_misc_file(os.path.join(directory, "misc.capacity"), missing_ok=False)
    current = read_misc_file(os.path.join(directory, "misc.current"), signed=True)
    peak = read_misc_file(os.path.join(directory, "misc.peak"), signed=True)
    for parsed in (capacity, current, peak):
        state.issues.extend(parsed.issues)

    if current.exists:
        usage, source = current.values, SOURCE_ROOT
        if not current.readable:
            source = SOURCE_UNAVAILABLE
    else:
        usage, counted = _sum_children_current(directory, state.issues)
        source = SOURCE_CHILDREN_SUM
        state.notes.append(
            f"{os.path.join(directory, 'misc.current')} does not exist (kernel older than the root misc.current): "
            f"usage is the sum of {counted} top-level child cgroups, a lower bound, because charges made "
            "from the root cgroup itself are invisible"
        )

    state.usage_source = source
    names = set(capacity.values) | {n for n, v in usage.items() if v}
    for name in sorted(names):
        cap = capacity.values.get(name, 0 if capacity.readable else None)
        if name in capacity.values and capacity.values[name] is None:
            cap = None
        if source == SOURCE_UNAVAILABLE:
            used = None
        elif name in usage:
            used = usage[name]
        elif source == SOURCE_CHILDREN_SUM:
            # No child charged it: zero is the right lower bound.
            used = 0
        else:
            # The kernel prints a line for every resource with a capacity, so a missing one means the
            # capacity changed between the two reads; do not guess.
            used = None
            state.issues.append(
                ParseIssue(current.path, f"no {name!r} line although misc.capacity lists it; read again")
            )
        state.resources[name] = ResourceState(
            name=name,
            capacity=cap,
            current=used,
            current_source=source,
            peak=peak.values.get(name) if peak.exists else None,
            known=name in KNOWN_RESOURCES,
        )
        if cap is not None and used is not None and used > cap:
            state.issues.append(
                ParseIssue(
                    directory,
                    f"{name}: usage {used} exceeds capacity {cap} (capacity lowered while guests run, "
                    "or the files were read mid-update)",
                )
            )
    for name in state.unknown_resources:
        state.notes.append(
            f"unknown misc resource {name!r} kept as read; this module knows {', '.join(KNOWN_RESOURCES)}"
        )
    if include_cgroups:
        state.cgroups = _walk_cgroups(directory, cgroup_depth, state.issues)
    return state
