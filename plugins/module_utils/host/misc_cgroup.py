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
import stat

from ansible_collections.confidential.tee.plugins.module_utils.common import tee
from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import HostReader, Problem
from ansible_collections.confidential.tee.plugins.module_utils.common.record import Record

# Every reader of the collection reports through the same record type.
ParseIssue = Problem

KNOWN_RESOURCES = tee.MISC_RESOURCES
# SEV-SNP guests are charged to the SEV-ES ASID pool; users still think of them as "snp".
RESOURCE_ALIASES = tee.MISC_ALIASES
U64_MAX = (1 << 64) - 1
S64_MAX = (1 << 63) - 1
MAX_FILE_BYTES = 64 * 1024

CGROUP_V2 = 2
CGROUP_V1 = 1

SOURCE_ROOT = "root"
SOURCE_CHILDREN_SUM = "children_sum"
SOURCE_UNAVAILABLE = "unavailable"

_NAME_RE = re.compile(r"^[a-z_][a-z0-9_]*\Z")
_DIGITS_RE = re.compile(r"^[0-9]+\Z")


class MiscFile(Record):
    """A parsed misc file: ``values`` maps names to integers, ``None`` where the value is unknown.

    ``complete`` means every line was attributed to a resource name, so a name *without* a line really
    has none (capacity 0); otherwise a missing name is unknown, because the unparsable line may be it.
    """

    __slots__ = ("canonical", "exists", "issues", "path", "unattributed", "values")
    __hash__ = None  # type: ignore[assignment]

    def __init__(
        self,
        path: str,
        exists: bool = True,
        values: dict[str, int | None] | None = None,
        issues: list[ParseIssue] | None = None,
        unattributed: int = 0,
        canonical: bool = True,
    ) -> None:
        self.path, self.exists, self.unattributed, self.canonical = path, exists, unattributed, canonical
        self.values = {} if values is None else values
        self.issues = [] if issues is None else issues

    @property
    def readable(self) -> bool:
        return self.exists and not any(i.line_number is None for i in self.issues)

    @property
    def complete(self) -> bool:
        return self.readable and self.unattributed == 0


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
    negative number is reported, not returned). A line that names a resource but does not parse makes
    that resource unknown (``None``); a line that names nothing recognisable makes the file incomplete.
    """
    result = MiscFile(path=path)
    text = _decode(data, result)
    if text is None:
        return result
    seen_lines: dict[str, int] = {}
    conflicting: set[str] = set()
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.strip()
        if not line:
            continue
        key, value, problem = _parse_line(line, allow_max, signed, suffix)
        if problem:
            result.issues.append(ParseIssue(path, problem, number, raw))
            if key is None:
                result.unattributed += 1
            else:
                # Known-bad beats absent: a later reader must not mistake "unparsable" for "no line".
                result.values[key] = None
                conflicting.add(key)
            continue
        if key in seen_lines:
            different = result.values.get(key) != value
            if different:
                conflicting.add(key)
            words = "with a different value" if different else "(the kernel prints each resource once)"
            result.issues.append(ParseIssue(path, f"duplicate line for {key!r} {words}", number, raw))
            continue
        seen_lines[key] = number
        result.values[key] = value
    for key in conflicting:
        result.values[key] = None
    result.canonical = text == _canonical_text(result, text, suffix, allow_max)
    return result


def _decode(data: bytes | str, result: MiscFile) -> str | None:
    if isinstance(data, bytes):
        try:
            text = data.decode("ascii")
        except UnicodeDecodeError:
            result.issues.append(
                ParseIssue(
                    result.path, "file is not ASCII text (a BOM, Latin-1 or binary?): not what the kernel writes"
                )
            )
            return None
    else:
        text = data
    if "\x00" in text:
        result.issues.append(ParseIssue(result.path, "file contains NUL bytes; is this really a misc cgroup file?"))
        return None
    return text


def _parse_line(line: str, allow_max: bool, signed: bool, suffix: str) -> tuple[str | None, int | None, str | None]:
    """``(name, value, problem)``; ``name`` is ``None`` when the line names no resource at all."""
    fields = line.split()
    key = fields[0]
    if suffix:
        if not key.endswith(suffix):
            return None, None, f"expected a key ending in {suffix!r}"
        key = key[: -len(suffix)]
    if not _NAME_RE.match(key):
        return None, None, f"resource name {key!r} is not a kernel identifier"
    if len(fields) != 2:
        return key, None, "expected '<name> <value>'"
    value, problem = _parse_value(fields[1], allow_max, signed)
    return key, value, problem


def _canonical_text(result: MiscFile, text: str, suffix: str, allow_max: bool) -> str:
    """What the kernel would have printed for the values parsed: ``"%s %llu\\n"`` per line, ``max``."""
    if result.issues:
        return text
    lines = []
    for key, value in result.values.items():
        shown = "max" if allow_max and value == U64_MAX else str(value)
        lines.append(f"{key}{suffix} {shown}\n")
    return "".join(lines)


def read_misc_file(
    reader: HostReader,
    rel: str,
    *,
    allow_max: bool = False,
    signed: bool = False,
    suffix: str = "",
    missing_ok: bool = True,
) -> MiscFile:
    """Read and parse one file under the reader's root; missing is ``exists=False``, unreadable an issue."""
    read = reader.read(rel, limit=MAX_FILE_BYTES, expected=not missing_ok, record=False)
    if not read.exists:
        result = MiscFile(path=read.path, exists=False)
        if read.problem:
            result.issues.append(ParseIssue(read.path, "file does not exist"))
        return result
    if read.problem:
        return MiscFile(path=read.path, issues=[read.problem])
    return parse_misc_text(read.data or b"", read.path, allow_max=allow_max, signed=signed, suffix=suffix)


class MiscLayout(Record):
    """Where the misc controller's root files are, or why there are none.

    ``rel`` is the controller directory relative to host_root (what the reader is given); ``not_root`` says the
    directory read is a container's own (non-root) cgroup: the controller exists, its capacity is elsewhere.
    """

    __slots__ = ("cgroup_version", "directory", "host_root", "not_root", "reason", "rel")
    __hash__ = None  # type: ignore[assignment]

    def __init__(
        self,
        host_root: str,
        cgroup_version: int | None,
        directory: str | None,
        reason: str | None = None,
        rel: str | None = None,
        not_root: bool = False,
    ) -> None:
        self.host_root, self.cgroup_version, self.directory = host_root, cgroup_version, directory
        self.reason, self.rel, self.not_root = reason, rel, not_root

    @property
    def present(self) -> bool:
        return self.directory is not None


V2_DIR = "sys/fs/cgroup"
V1_DIR = "sys/fs/cgroup/misc"


def locate_misc(reader: HostReader) -> MiscLayout:
    """Find the misc controller on the host (v2 unified hierarchy first, then v1)."""
    host_root = reader.host_root
    v2, v1 = reader.path(V2_DIR), reader.path(V1_DIR)
    if reader.exists(f"{V2_DIR}/misc.capacity"):
        return MiscLayout(host_root, CGROUP_V2, v2, rel=V2_DIR)
    if reader.exists(f"{V1_DIR}/misc.capacity"):
        return MiscLayout(host_root, CGROUP_V1, v1, rel=V1_DIR)
    inner = _non_root_cgroup(reader, V2_DIR) or _non_root_cgroup(reader, V1_DIR)
    if inner:
        return MiscLayout(host_root, None, None, inner, not_root=True)
    if not reader.isdir(V2_DIR):
        reason = f"{v2} does not exist: no cgroup filesystem is mounted under host_root {host_root!r}"
    else:
        text = reader.read(f"{V2_DIR}/cgroup.controllers", record=False).text()
        controllers = None if text is None else text.split()
        if controllers is not None and "misc" not in controllers:
            reason = (
                f"the misc cgroup controller is not available ({v2}/cgroup.controllers lists "
                f"{' '.join(controllers) or 'nothing'}): the kernel lacks CONFIG_CGROUP_MISC or is older than 5.13"
            )
        else:
            reason = (
                f"no misc.capacity in {v2} (cgroup v2) or {v1} (cgroup v1): the kernel lacks CONFIG_CGROUP_MISC, "
                "or the misc controller is not mounted"
            )
    return MiscLayout(host_root, None, None, reason)


# In a container, /sys/fs/cgroup is the container's own cgroup, never the host's root, and misc.capacity exists only
# on the root cgroup (kernel/cgroup/misc.c: "capacity" is CFTYPE_ONLY_ON_ROOT, "max" and "events" are
# CFTYPE_NOT_ON_ROOT, like cgroup.type in kernel/cgroup/cgroup.c). Either its own cgroup namespace makes that
# cgroup look like "/" (/proc/self/cgroup "0::/"), or, without one, the runtime bind-mounts it there
# (/proc/self/cgroup names the real path).
_NOT_ON_ROOT = ("misc.max", "misc.events", "cgroup.type")
DAEMONSET_FIX = (
    "read the host's root cgroup instead: mount the host's / into the pod (hostPath /, e.g. at /host) and set "
    "host_root: /host, or run the pod with hostPID: true and host_root: /proc/1/root (see docs/host-truth.md)"
)


def _non_root_cgroup(reader: HostReader, rel: str) -> str | None:
    """Why ``rel`` has no misc.capacity when it is a non-root cgroup with the misc controller, else ``None``."""
    if not reader.exists(f"{rel}/misc.current") or not any(reader.exists(f"{rel}/{n}") for n in _NOT_ON_ROOT):
        return None
    where = reader.path(rel)
    text = reader.read("proc/self/cgroup", record=False).text() or ""
    own = next((line[3:].strip() for line in text.splitlines() if line.startswith("0::")), None)
    if own == "/":
        how = (
            "this process has its own cgroup namespace (/proc/self/cgroup is '0::/'), so its container's cgroup "
            "looks like the root"
        )
    elif own:
        how = "it is this process's cgroup %s, bind-mounted there by the container runtime" % own[:200]
    else:
        how = "it is a container's cgroup (it has %s, which the root cgroup never has)" % "/".join(_NOT_ON_ROOT)
    return (
        f"{where} is not the host's root cgroup, and misc.capacity exists only there: {how}. "
        f"TEE key capacity cannot be read from inside; {DAEMONSET_FIX}"
    )


class ResourceState(Record):
    """Capacity and usage of one misc resource on the whole host."""

    __slots__ = ("capacity", "current", "current_source", "known", "name", "peak")
    __hash__ = None  # type: ignore[assignment]

    def __init__(
        self,
        name: str,
        capacity: int | None,
        current: int | None,
        current_source: str,
        peak: int | None = None,
        known: bool = True,
    ) -> None:
        self.name, self.capacity, self.current, self.current_source = name, capacity, current, current_source
        self.peak, self.known = peak, known

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


class CgroupState(Record):
    """The misc files of one child cgroup (path relative to the controller root)."""

    __slots__ = ("current", "events", "events_local", "max", "path", "peak")
    __hash__ = None  # type: ignore[assignment]

    def __init__(
        self,
        path: str,
        current: dict[str, int | None],
        max: dict[str, int | None],
        peak: dict[str, int | None],
        events: dict[str, int | None],
        events_local: dict[str, int | None],
    ) -> None:
        self.path, self.current, self.max, self.peak = path, current, max, peak
        self.events, self.events_local = events, events_local

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


class MiscState(Record):
    """Everything read from one host's misc controller.

    ``usage_source``: where usage came from (root misc.current, the children's sum on old kernels, or nowhere);
    ``capacity_complete`` / ``usage_complete``: whether a resource without a line in misc.capacity / the usage
    files really has none.
    """

    __slots__ = (
        "capacity_complete",
        "cgroups",
        "issues",
        "layout",
        "notes",
        "resources",
        "usage_complete",
        "usage_source",
    )
    __hash__ = None  # type: ignore[assignment]

    def __init__(
        self,
        layout: MiscLayout,
        resources: dict[str, ResourceState] | None = None,
        issues: list[ParseIssue] | None = None,
        notes: list[str] | None = None,
        cgroups: list[CgroupState] | None = None,
        usage_source: str = SOURCE_UNAVAILABLE,
        capacity_complete: bool = False,
        usage_complete: bool = False,
    ) -> None:
        self.layout = layout
        self.resources = {} if resources is None else resources
        self.issues = [] if issues is None else issues
        self.notes = [] if notes is None else notes
        self.cgroups = [] if cgroups is None else cgroups
        self.usage_source, self.capacity_complete, self.usage_complete = usage_source, capacity_complete, usage_complete

    @property
    def unknown_resources(self) -> list[str]:
        return sorted(name for name, state in self.resources.items() if not state.known)

    def resource(self, name: str) -> ResourceState | None:
        return self.resources.get(canonical_resource(name))

    def entry(self, name: str) -> ResourceState:
        """The state of ``name``, also when the kernel printed no line for it.

        The kernel omits resources whose capacity is 0, and nobody can charge those, so a missing line
        in a cleanly read file means capacity 0 and usage 0. When a file could not be read or has a line
        that names nothing, a missing resource is unknown (``None``), never 0.
        """
        name = canonical_resource(name)
        found = self.resources.get(name)
        if found is not None:
            return found
        capacity = 0 if self.capacity_complete else None
        # misc_cg_try_charge() refuses a resource without capacity, so nobody can hold one.
        current = 0 if capacity == 0 else None
        return ResourceState(name, capacity, current, self.usage_source, known=name in KNOWN_RESOURCES)


def _child_dirs(reader: HostReader, rel: str) -> list[str]:
    names = reader.listdir(rel) or []
    children = []
    for name in names:
        found = reader.stat(f"{rel}/{name}", follow=False)
        if found and stat.S_ISDIR(found.st_mode):
            children.append(f"{rel}/{name}")
    return children


def _sum_children_current(reader: HostReader, rel: str, issues: list[ParseIssue]) -> tuple[dict, int, bool]:
    totals: dict[str, int | None] = {}
    counted = 0
    complete = True
    for child in _child_dirs(reader, rel):
        parsed = read_misc_file(reader, f"{child}/misc.current", signed=True)
        if not parsed.exists:
            continue
        counted += 1
        complete = complete and parsed.complete
        issues.extend(parsed.issues)
        for name, value in parsed.values.items():
            if value is None or totals.get(name, 0) is None:
                totals[name] = None
            else:
                totals[name] = totals.get(name, 0) + value
    return totals, counted, complete


def _walk_cgroups(reader: HostReader, rel: str, max_depth: int, issues: list[ParseIssue]) -> list[CgroupState]:
    found: list[CgroupState] = []
    stack = [(child, 1) for child in reversed(_child_dirs(reader, rel))]
    while stack:
        path, depth = stack.pop()
        files = {
            "current": read_misc_file(reader, f"{path}/misc.current", signed=True),
            "max": read_misc_file(reader, f"{path}/misc.max", allow_max=True),
            "peak": read_misc_file(reader, f"{path}/misc.peak", signed=True),
            "events": read_misc_file(reader, f"{path}/misc.events", suffix=".max"),
            "events_local": read_misc_file(reader, f"{path}/misc.events.local", suffix=".max"),
        }
        if files["current"].exists or files["max"].exists:
            for parsed in files.values():
                issues.extend(parsed.issues)
            found.append(CgroupState(path=os.path.relpath(path, rel), **{k: v.values for k, v in files.items()}))
        if depth < max_depth:
            stack.extend((child, depth + 1) for child in reversed(_child_dirs(reader, path)))
    return found


def _usage(reader: HostReader, state: MiscState, current: MiscFile) -> dict[str, int | None]:
    """Usage per resource from the root ``misc.current``, or summed from the children on old kernels."""
    if current.exists:
        state.usage_source = SOURCE_ROOT if current.readable else SOURCE_UNAVAILABLE
        state.usage_complete = current.complete
        return current.values
    usage, counted, complete = _sum_children_current(reader, state.layout.rel, state.issues)
    state.usage_source = SOURCE_CHILDREN_SUM
    state.usage_complete = complete
    state.notes.append(
        f"{state.layout.directory}/misc.current does not exist (kernel older than the root misc.current): "
        f"usage is the sum of {counted} top-level child cgroups, a lower bound, because charges made "
        "from the root cgroup itself are invisible"
    )
    return usage


def _used(state: MiscState, name: str, usage: dict[str, int | None], current_path: str) -> int | None:
    if state.usage_source == SOURCE_UNAVAILABLE:
        return None
    if name in usage:
        return usage[name]
    if not state.usage_complete:
        return None
    if state.usage_source == SOURCE_CHILDREN_SUM:
        return 0  # no child charged it: zero is the right lower bound
    # The kernel prints a line for every resource with a capacity, so a missing one means the capacity
    # changed between the two reads; do not guess.
    state.issues.append(ParseIssue(current_path, f"no {name!r} line although misc.capacity lists it; read again"))
    return None


def _note_shapes(state: MiscState, files: list[MiscFile]) -> None:
    odd = [parsed.path for parsed in files if parsed.exists and parsed.readable and not parsed.canonical]
    if odd:
        state.notes.append(
            f"{', '.join(odd)}: values accepted, but the text is not byte for byte what the kernel prints "
            "('<name> <value>' lines, one space, no leading zeros or '-0', LF line ends): the file was not "
            "written by the kernel (a copy, a fixture or another tool?)"
        )


def read_misc_state(reader: HostReader, *, include_cgroups: bool = False, cgroup_depth: int = 3) -> MiscState:
    """Read capacity, usage and peaks of every misc resource on the host.

    With no misc controller the result has ``layout.present == False`` and ``layout.reason`` says
    why; it is the caller's choice whether that is an error. What is wrong with the files is in the state's
    ``issues``; a caller that reads again and again (an agent, a plugin) gives ``reader.fresh()`` each time, so
    that the host's problem list does not grow with every pass.
    """
    state = MiscState(layout=locate_misc(reader))
    if not state.layout.present:
        return state
    rel = state.layout.rel
    capacity = read_misc_file(reader, f"{rel}/misc.capacity", missing_ok=False)
    current = read_misc_file(reader, f"{rel}/misc.current", signed=True)
    peak = read_misc_file(reader, f"{rel}/misc.peak", signed=True)
    for parsed in (capacity, current, peak):
        state.issues.extend(parsed.issues)
    state.capacity_complete = capacity.complete
    usage = _usage(reader, state, current)
    names = set(capacity.values) | {n for n, v in usage.items() if v}
    for name in sorted(names):
        cap = capacity.values.get(name, 0 if capacity.complete else None)
        used = _used(state, name, usage, current.path)
        state.resources[name] = ResourceState(
            name=name,
            capacity=cap,
            current=used,
            current_source=state.usage_source,
            peak=peak.values.get(name) if peak.exists else None,
            known=name in KNOWN_RESOURCES,
        )
        if cap is not None and used is not None and used > cap:
            state.issues.append(
                ParseIssue(
                    state.layout.directory,
                    f"{name}: usage {used} exceeds capacity {cap} (capacity lowered while guests run, "
                    "or the files were read mid-update)",
                )
            )
    _note_shapes(state, [capacity, current, peak])
    for name in state.unknown_resources:
        state.notes.append(
            f"unknown misc resource {name!r} kept as read; this module knows {', '.join(KNOWN_RESOURCES)}"
        )
    if include_cgroups:
        state.cgroups = _walk_cgroups(reader, rel, cgroup_depth, state.issues)
    return state
