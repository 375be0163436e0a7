# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""Kernel-argument engine: requests, boot-setup detection, planning, execution and verification.

Pure standard library so that the module, the simulator and tests share one implementation. Arguments
are split and compared by :mod:`cmdline` (the kernel's own tokenizer and ``parameq``), host files are
read by :mod:`host_reader`, GRUB's shell files are evaluated by :mod:`grub_config`. Nothing here writes
or runs anything by itself: :func:`plan` returns :class:`Action` objects, :class:`Executor` is the one
place where they take effect (and only outside check mode), and :func:`verify` reads the host again
afterwards so that success is reported only when the boot configuration really says what was asked.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass, field, replace

from ansible_collections.confidential.tee.plugins.module_utils.boot import bls, kernel_install_layout, loader_entry
from ansible_collections.confidential.tee.plugins.module_utils.boot import grub_config as grub
from ansible_collections.confidential.tee.plugins.module_utils.common.changes import ChangeError, Changes
from ansible_collections.confidential.tee.plugins.module_utils.common.errors import TeeError
from ansible_collections.confidential.tee.plugins.module_utils.common.file_names import fits
from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import HostReader
from ansible_collections.confidential.tee.plugins.module_utils.common.process import run_bounded
from ansible_collections.confidential.tee.plugins.module_utils.common.validation import (
    display_text,
    list_of_strings_problem,
)
from ansible_collections.confidential.tee.plugins.module_utils.host.cmdline import (
    Arg,
    kernel_args,
    parse_arg_text,
    tokenize,
)

SETUPS = ("grub", "bls", "kernel_install", "ostree")
BIN_DIRS = ("usr/local/sbin", "usr/local/bin", "usr/sbin", "usr/bin", "sbin", "bin")
DROPIN_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*\Z")
# Characters that would need shell escaping in a GRUB drop-in or are never part of a kernel argument.
UNSAFE_ARG_RE = re.compile(r"[\s'`$\\;&|<>()\"]")
MAX_BOOT_FILE = 1024 * 1024
GRUBENV = "/boot/grub2/grubenv"
# Files grubby rewrites besides the entries (grubby-bls: GRUB_CMDLINE_LINUX, /etc/kernel/cmdline, kernelopts).
GRUBBY_TOUCHES = (grub.GRUB_MAIN, "/etc/kernel/cmdline", GRUBENV)


class CmdlineError(TeeError):
    """Bad input or an unsupported host layout; the message says what, where and how to fix it."""


# ------------------------------------------------------------------------------------------ requests


def parse_arg(spec: object, where: str = "argument") -> Arg:
    """Validate one requested argument (``name`` or ``name=value``)."""
    if not isinstance(spec, str):
        raise CmdlineError(f"{where} {spec!r} is a {type(spec).__name__}, expected a string like 'name=value'")
    if not spec or spec != spec.strip():
        raise CmdlineError(f"{where} {spec!r} is empty or has surrounding whitespace")
    if spec == "--":
        raise CmdlineError(f"{where} '--' separates init arguments and cannot be managed")
    if UNSAFE_ARG_RE.search(spec):
        # Requests are written into shell (GRUB drop-ins) and argv lists: keep them to plain tokens.
        raise CmdlineError(
            f"{where} {spec!r} contains whitespace, quotes or shell metacharacters; kernel arguments "
            "managed here must be single plain tokens such as 'kvm_intel.tdx=1'"
        )
    arg = parse_arg_text(spec)
    if not arg.name or arg.name.startswith("="):
        raise CmdlineError(f"{where} {spec!r} has no name before '='")
    return arg


def conflicts(arg: Arg, present: list[Arg], absent: list[Arg]) -> bool:
    """Whether an existing argument must go: it is asked absent, or it sets a present name differently."""
    if any(arg.key == spec.key and spec.value in (None, arg.value) for spec in absent):
        return True
    return any(arg.key == spec.key and not arg.same_setting(spec) for spec in present)


def satisfied(raws: list[str], present: list[Arg], absent: list[Arg]) -> bool:
    args = kernel_args([parse_arg_text(raw) for raw in raws])
    for spec in present:
        matches = [arg for arg in args if arg.key == spec.key]
        if not matches or not all(arg.same_setting(spec) for arg in matches):
            return False
    return not any(conflicts(arg, [], absent) for arg in args)


def unmet(before: list[str], after: list[str], present: list[Arg], absent: list[Arg]) -> list[str]:
    """Why ``after`` is not a correct result: the request unmet, or an unrelated argument lost."""
    problems = []
    after_args = kernel_args([parse_arg_text(raw) for raw in after])
    for spec in present:
        matches = [arg for arg in after_args if arg.key == spec.key]
        if not matches or not all(arg.same_setting(spec) for arg in matches):
            found = " ".join(arg.raw for arg in matches) or "none"
            problems.append(f"{spec.raw} is not the only setting of {spec.name} (found: {found})")
    for spec in absent:
        left = [arg.raw for arg in after_args if conflicts(arg, [], [spec])]
        if left:
            problems.append(f"{' '.join(left)} still present although {spec.raw} was asked absent")
    kept = Counter(raw for raw in before if not conflicts(parse_arg_text(raw), present, absent))
    lost = kept - Counter(after)
    if lost:
        problems.append(f"unrelated arguments would be lost: {' '.join(sorted(lost))}")
    return problems


@dataclass
class EditPlan:
    deletes: set[int] = field(default_factory=set)
    replaces: dict[int, str] = field(default_factory=dict)
    inserts: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.deletes or self.replaces or self.inserts)


def plan_edits(tokens: list[Arg], present: list[Arg], absent: list[Arg]) -> EditPlan:
    """Decide per token what to do; ``present`` makes a name single-valued with the requested value."""
    edit = EditPlan()
    kernel = kernel_args(tokens)
    for spec in absent:
        for idx, tok in enumerate(kernel):
            if tok.key == spec.key and (spec.value is None or tok.value == spec.value):
                edit.deletes.add(idx)
    for spec in present:
        matches = [i for i, t in enumerate(kernel) if t.key == spec.key and i not in edit.deletes]
        if matches and all(kernel[i].same_setting(spec) for i in matches):
            continue
        equal = [i for i in matches if kernel[i].same_setting(spec)]
        if equal:
            edit.deletes.update(i for i in matches if i != equal[0])
        elif matches:
            edit.replaces[matches[0]] = spec.raw
            edit.deletes.update(matches[1:])
        else:
            edit.inserts.append(spec.raw)
    return edit


def apply_to_list(tokens: list[Arg], edit: EditPlan) -> list[str]:
    kernel_len = len(kernel_args(tokens))
    out = [edit.replaces.get(i, t.raw) for i, t in enumerate(tokens[:kernel_len]) if i not in edit.deletes]
    return out + edit.inserts + [t.raw for t in tokens[kernel_len:]]


def apply_to_text(text: str, tokens: list[Arg], edit: EditPlan) -> str:
    """Apply an edit to the text the tokens came from, leaving every untouched byte where it was."""
    if edit.empty:
        return text
    ops: list[tuple[int, int, str]] = []  # (start, end, replacement)
    kept = [i for i in range(len(tokens)) if i not in edit.deletes]
    first_kept = kept[0] if kept else None
    for i in sorted(edit.deletes):
        if first_kept is None:
            ops.append((tokens[0].start if i == 0 else tokens[i - 1].end, tokens[i].end, ""))
        elif i < first_kept:
            ops.append((tokens[i].start, tokens[i + 1].start, ""))
        else:
            ops.append((tokens[i - 1].end, tokens[i].end, ""))
    for i, raw in edit.replaces.items():
        ops.append((tokens[i].start, tokens[i].end, raw))
    if edit.inserts:
        kernel = kernel_args(tokens)
        added = " ".join(edit.inserts)
        if kernel:
            ops.append((kernel[-1].end, kernel[-1].end, " " + added))
        elif tokens:  # only "--" and init arguments
            ops.append((tokens[0].start, tokens[0].start, added + " "))
        else:
            pos = len(text.rstrip("\r\n"))
            ops.append((pos, pos, added))
    for start, end, repl in sorted(ops, key=lambda op: (op[0], op[1]), reverse=True):
        text = text[:start] + repl + text[end:]
    return text


def edit_cmdline(text: str, present: list[Arg], absent: list[Arg]) -> str:
    tokens = tokenize(text)
    return apply_to_text(text, tokens, plan_edits(tokens, present, absent))


# ------------------------------------------------------------------------------------------ host files


def read_boot_file(reader: HostReader, path: str) -> str | None:
    """Text of a boot configuration file (bytes preserved), ``None`` when absent; unreadable is an error."""
    result = reader.read(path, limit=MAX_BOOT_FILE, record=False)
    if not result.exists:
        return None
    if result.problem:
        raise CmdlineError(
            f"cannot read {result.path}: {result.problem.problem}; check the file, permissions or host_root"
        )
    return grub.decode(result.data or b"")


def find_tool(reader: HostReader, *names: str) -> str | None:
    """Host path (as seen from inside host_root) of the first tool found, or None."""
    for name in names:
        for directory in BIN_DIRS:
            if reader.is_executable(f"/{directory}/{name}"):
                return f"/{directory}/{name}"
    return None


def list_boot_dir(reader: HostReader, path: str, suffix: str) -> list[str]:
    names = reader.listdir(path)
    if names is None:
        raise CmdlineError(f"cannot list {reader.path(path)}: {reader.problems[-1].problem}")
    return [f"{path.rstrip('/')}/{n}" for n in names if n.endswith(suffix) and not n.startswith(".")]


def detect_setup(reader: HostReader) -> tuple[str | None, list[str]]:
    """Pick the boot setup from the files present; also return what was looked at, for error messages."""
    ostree = bool(reader.exists("/run/ostree-booted"))
    entries = list_boot_dir(reader, "/boot/loader/entries", ".conf")
    grubby = find_tool(reader, "grubby")
    grub_default = bool(reader.isfile(grub.GRUB_MAIN))
    kernel_cmdline = bool(reader.isfile("/etc/kernel/cmdline"))
    found = [
        "/run/ostree-booted " + ("present" if ostree else "absent"),
        f"/boot/loader/entries: {len(entries)} *.conf",
        "grubby " + (grubby or "not found"),
        "/etc/default/grub " + ("present" if grub_default else "absent"),
        "/etc/kernel/cmdline " + ("present" if kernel_cmdline else "absent"),
    ]
    if ostree:
        return "ostree", found
    if entries and grubby:
        return "bls", found
    if grub_default:
        return "grub", found
    if kernel_cmdline:
        return "kernel_install", found
    return None, found


# ------------------------------------------------------------------------------------------ actions


@dataclass
class Action:
    kind: str  # "write", "remove" or "command"
    description: str
    path: str | None = None
    content: str | None = None
    mode: int = 0o644
    argv: list[str] | None = None
    before: str | None = None
    backs_up: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        """The record returned to the user (text made JSON-safe: file names may hold any bytes)."""
        out: dict = {"kind": self.kind, "description": display_text(self.description)}
        if self.path is not None:
            out["path"] = display_text(self.path)
        if self.argv is not None:
            out["argv"] = [display_text(arg) for arg in self.argv]
        return out


@dataclass
class Plan:
    setup: str
    actions: list[Action]
    before: list[str]
    configured: list[str]
    source: str
    warnings: list[str] = field(default_factory=list)
    # Read the configuration back after execution: (host_root, run_host_command) -> configured arguments.
    readback: object = None
    # True where the planned list is exactly what the files will say; False where a tool (grubby,
    # rpm-ostree) decides the order itself and only the request and the unrelated arguments are checked.
    exact: bool = True
    present: list[Arg] = field(default_factory=list)
    absent: list[Arg] = field(default_factory=list)
    # Problems of the written files, checked after writing and before any tool (update-grub, kernel-install,
    # grubby) runs: (executor) -> [problem]. A tool only ever runs on files proven right.
    before_tools: object = None
    # Problems of what the tools wrote, checked after they ran (kernel-install's entry): (executor) -> [problem].
    after_tools: object = None
    # What undoes a command's effect outside the files when the result is not as planned (rpm-ostree's new
    # deployment): (executor) -> a sentence saying what was undone, or what is left and how to undo it.
    undo: object = None

    @property
    def changed(self) -> bool:
        return bool(self.actions)


def write_action(path: str, before: str | None, after: str, what: str) -> Action | None:
    if before == after:
        return None
    verb = "create" if before is None else "update"
    return Action("write", f"{verb} {path} ({what})", path=path, content=after, before=before)


# ------------------------------------------------------------------------------------------ GRUB


@dataclass
class GrubFiles:
    """``/etc/default/grub`` and the ``grub.d`` drop-ins in sourcing order, as text."""

    order: list[str]
    texts: dict[str, str]
    dropin: str  # the drop-in of the request being planned
    dropins: tuple[str, ...] = ()  # every request's drop-in (one per request of the task)

    def present(self, texts: dict[str, str | None] | None = None) -> dict[str, str]:
        source = self.texts if texts is None else texts
        return {path: source[path] for path in self.order if source.get(path) is not None}


def read_grub_files(reader: HostReader, dropins: list[str]) -> GrubFiles:
    main = read_boot_file(reader, grub.GRUB_MAIN)
    if main is None:
        raise CmdlineError(f"boot setup 'grub' needs {reader.path(grub.GRUB_MAIN)}, which is missing")
    names = reader.listdir(grub.GRUB_DIR)
    if names is None:
        raise CmdlineError(f"cannot list {reader.path(grub.GRUB_DIR)}: {reader.problems[-1].problem}")
    texts: dict[str, str] = {grub.GRUB_MAIN: main}
    for name in grub.source_order(names):
        path = f"{grub.GRUB_DIR}/{name}"
        result = reader.read(path, limit=MAX_BOOT_FILE, record=False)
        if not result.exists:
            continue  # a dangling link: grub-mkconfig's [ -e ] skips it too
        if result.problem:
            raise CmdlineError(
                f"{result.path} {result.problem.problem}; grub-mkconfig sources every *.cfg there and would fail "
                "or hang on it: remove it or make it a regular file"
            )
        texts[path] = grub.decode(result.data or b"")
    listed = [path.rsplit("/", 1)[1] for path in texts if path != grub.GRUB_MAIN]
    ordered = grub.source_order(list(dict.fromkeys([*listed, *(dropin.rsplit("/", 1)[1] for dropin in dropins)])))
    order = [grub.GRUB_MAIN] + [f"{grub.GRUB_DIR}/{name}" for name in ordered]
    return GrubFiles(order, texts, dropins[0], tuple(dropins))


def _evaluate(files: GrubFiles, texts: dict[str, str | None], runner) -> list[str]:
    try:
        return grub.evaluate(files.present(texts), runner).raws()
    except grub.GrubError as exc:
        raise CmdlineError(str(exc)) from exc


def _remove_one(files: GrubFiles, texts: dict[str, str | None], raw: str, current: list[str], runner) -> bool:
    """Delete one spelling of ``raw`` from a file other than the drop-in, proven by evaluation."""
    for path in files.order:
        text = texts.get(path)
        if path == files.dropin or text is None:
            continue
        for start, end in grub.occurrences(text, raw):
            candidate = dict(texts, **{path: grub.without_span(text, start, end)})
            after = _evaluate(files, candidate, runner)
            if any(current[:i] + current[i + 1 :] == after for i, seen in enumerate(current) if seen == raw):
                texts[path] = candidate[path]
                return True
    return False


def _grub_removal_error(files: GrubFiles, raw: str, runner) -> CmdlineError:
    origin = _origin(files, raw, runner)
    return CmdlineError(
        f"cannot remove {raw!r} from the GRUB command line: after evaluating the files the way grub-mkconfig "
        f"does, it comes from {origin}, where it is produced by shell code this module does not rewrite "
        "(a variable, a command substitution or an expansion). Remove it there by hand, then run again"
    )


def _origin(files: GrubFiles, raw: str, runner) -> str:
    """The first file after whose sourcing ``raw`` is on the command line (for messages)."""
    for count in range(1, len(files.order) + 1):
        subset = replace(files, order=files.order[:count])
        if raw in _evaluate(subset, subset.texts, runner):
            return files.order[count - 1]
    return "the GRUB files"


def _own_args(own: list[str], foreign: list[str], present: list[Arg], absent: list[Arg]) -> list[str]:
    """The drop-in's arguments after the change: its own minus conflicts, plus what nothing else provides."""
    kept = [raw for raw in own if not conflicts(parse_arg_text(raw), present, absent)]
    others = [parse_arg_text(raw) for raw in foreign if not conflicts(parse_arg_text(raw), present, absent)]
    for spec in present:
        if not any(arg.same_setting(spec) for arg in others) and spec.raw not in kept:
            kept.append(spec.raw)
    return kept


def plan_grub(reader: HostReader, present: list[Arg], absent: list[Arg], name: str, runner=run_bounded) -> Plan:
    """Plan the drop-in and the removals, and prove the result by evaluating the planned files."""
    return plan_grub_requests(reader, [Request(name, present, absent)], runner)


def plan_grub_requests(reader: HostReader, requests: list[Request], runner=run_bounded) -> Plan:
    """Plan every request's drop-in in turn on the files the previous ones leave, then prove the whole result.

    Each request keeps its own drop-in, exactly as if it had been a task of its own: one task for several roles
    writes the files that their tasks one after another would write, but regenerates the configuration once.
    """
    files = read_grub_files(reader, [f"{grub.GRUB_DIR}/{request.name}.cfg" for request in requests])
    texts: dict[str, str | None] = dict(files.texts)
    before = _evaluate(files, texts, runner)
    current = before
    for request in requests:
        mine = replace(files, dropin=f"{grub.GRUB_DIR}/{request.name}.cfg")
        current = _plan_dropin(mine, texts, current, request, runner)
    present, absent = combine(requests)
    problems = unmet(before, current, present, absent)
    if problems:
        raise _grub_unmet_error(files, texts, problems)
    return _grub_plan(reader, files, texts, before, current, runner)


def _plan_dropin(files: GrubFiles, texts: dict, current: list[str], request: Request, runner) -> list[str]:
    """Plan one request's drop-in and removals into ``texts``; return the command line the files then give."""
    present, absent = request.present, request.absent
    try:
        own_before = grub.dropin_args(files.dropin, texts.get(files.dropin))
    except grub.GrubError as exc:
        raise CmdlineError(str(exc)) from exc
    foreign = list((Counter(current) - Counter(own_before)).elements())
    own_after = _own_args(own_before, foreign, present, absent)
    texts[files.dropin] = grub.dropin_text(request.name, own_after) if own_after else None
    current = _evaluate(files, texts, runner)
    for raw in [r for r in current if conflicts(parse_arg_text(r), present, absent)]:
        if raw in current and not _remove_one(files, texts, raw, current, runner):
            raise _grub_removal_error(files, raw, runner)
        current = _evaluate(files, texts, runner)
    return current


def _grub_unmet_error(files: GrubFiles, texts, problems: list[str]) -> CmdlineError:
    position = files.order.index(files.dropin)
    later = [path for path in files.order[position + 1 :] if texts.get(path) is not None]
    hint = (
        f"a file sourced after {files.dropin} ({', '.join(later)}) may replace GRUB_CMDLINE_LINUX instead of extending "
        "it: choose a drop-in name that sorts after it, or make it extend the variable"
        if later
        else "the files set the variables in a way this module cannot change safely: edit them by hand"
    )
    return CmdlineError(
        "after the planned change the GRUB command line (evaluated the way grub-mkconfig does) would still be "
        f"wrong: {'; '.join(problems)}. Nothing was written; {hint}"
    )


def _grub_plan(reader: HostReader, files: GrubFiles, texts, before: list[str], after: list[str], runner) -> Plan:
    actions: list[Action] = []
    for path in files.order:
        old, new = files.texts.get(path), texts.get(path)
        if old == new:
            continue
        if new is None:
            actions.append(Action("remove", f"remove {path} (no managed arguments left)", path=path, before=old))
        else:
            actions.append(write_action(path, old, new, "GRUB_CMDLINE_LINUX"))
    plan = Plan("grub", actions, before, after, "GRUB_CMDLINE_LINUX + GRUB_CMDLINE_LINUX_DEFAULT")

    def readback(host_root: str, _run) -> list[str]:
        written = read_grub_files(HostReader(host_root), list(files.dropins))
        return _evaluate(written, written.texts, runner)

    plan.readback = readback
    plan.before_tools = lambda executor: _readback_problems(plan, executor)[1]
    special = [raw for raw in after if grub.GRUB_SCRIPT_SPECIAL.search(raw)]
    if special:
        plan.warnings.append(
            f"{' '.join(special)}: GRUB's own script parser treats $, \\, quotes and ; specially when it reads "
            "grub.cfg, so the kernel may not receive these exactly as configured"
        )
    if actions:
        _add_grub_regeneration(reader, plan)
    return plan


def _add_grub_regeneration(reader: HostReader, plan: Plan) -> None:
    tool = find_tool(reader, "update-grub")
    argv, out = ([tool], "/boot/grub/grub.cfg") if tool else (None, None)
    if not tool:
        mkconfig = find_tool(reader, "grub-mkconfig", "grub2-mkconfig")
        if mkconfig:
            out = "/boot/grub2/grub.cfg" if mkconfig.endswith("grub2-mkconfig") else "/boot/grub/grub.cfg"
            argv = [mkconfig, "-o", out]
    if argv:
        action = Action("command", "regenerate the GRUB configuration", argv=argv)
        action.backs_up = [out]  # restored with the rest when anything fails after it ran
        plan.actions.append(action)
    else:
        plan.warnings.append(
            "neither update-grub nor grub-mkconfig was found under host_root; the new arguments reach "
            "the boot menu only after the GRUB configuration is regenerated"
        )


# ------------------------------------------------------------------------------------------ BLS


def _bls_options(path: str, text: str, grubenv: str | None, warnings: list[str] | None = None) -> str:
    try:
        options = bls.options_text(path, text, warnings)
    except bls.BlsError as exc:
        raise CmdlineError(f"{exc}; nothing was changed") from None
    if "$kernelopts" in options and grubenv:
        # RHEL 8 keeps the shared arguments in grubenv and references them from each entry.
        for line in grubenv.splitlines():
            if line.startswith("kernelopts="):
                options = options.replace("$kernelopts", line.partition("=")[2].strip())
    return options


def bls_texts(reader: HostReader) -> dict[str, str]:
    entries = list_boot_dir(reader, "/boot/loader/entries", ".conf")
    if not entries:
        raise CmdlineError(f"boot setup 'bls' needs entries in {reader.path('/boot/loader/entries')}")
    return {path: read_boot_file(reader, path) or "" for path in entries}


def bls_entries(reader: HostReader, warnings: list[str] | None = None, texts=None) -> dict[str, list[Arg]]:
    texts = bls_texts(reader) if texts is None else texts
    grubenv = read_boot_file(reader, GRUBENV)
    return {path: tokenize(_bls_options(path, text, grubenv, warnings)) for path, text in texts.items()}


def _bls_requests(per_entry: dict[str, list[Arg]], present: list[Arg], absent: list[Arg]) -> tuple[list, list]:
    """The spellings grubby must remove (as written in the entries) and the arguments it must add."""
    remove: list[str] = []
    add: list[str] = []
    for tokens in per_entry.values():
        kernel = kernel_args(tokens)
        # grubby removes arguments as written: name the spelling that is really there (kvm-intel.tdx=0).
        remove += [arg.raw for arg in kernel if conflicts(arg, present, absent) and arg.raw not in remove]
        for spec in present:
            if not any(arg.same_setting(spec) for arg in kernel) and spec.raw not in add:
                add.append(spec.raw)
    bad = [raw for raw in remove if UNSAFE_ARG_RE.search(raw)]
    if bad:
        raise CmdlineError(
            f"{' '.join(bad)} must be removed but contains quotes or spaces, which grubby cannot remove reliably: "
            "edit the entries in /boot/loader/entries by hand; nothing was changed"
        )
    return remove, add


def _grubby_words(tokens: list[Arg], present: list[Arg], absent: list[Arg], add: list[str]) -> list[str]:
    """An entry's words once grubby has run with ``--remove-args`` and then ``--args=<add>``, in its order.

    Removed arguments go; every argument of ``--args`` ends up at the end, in that order, where it was present
    already or not (grubby-bls removes each added name and appends them; an older one appends the missing ones and
    sets the others in place, which on a line already in this order changes nothing). Arguments after ``--`` stay
    last. So an entry written this way is one no grubby changes.
    """
    kernel = kernel_args(tokens)
    names = {raw.split("=", 1)[0] for raw in add}
    kept = [t.raw for t in kernel if not conflicts(t, present, absent) and t.raw.split("=", 1)[0] not in names]
    return [*kept, *add, *(t.raw for t in tokens[len(kernel) :])]


def _prove_bls(per_entry: dict[str, list[Arg]], present: list[Arg], absent: list[Arg], add: list[str]) -> dict:
    """Every entry's words after the change, proven to meet the request before anything is written."""
    planned, problems = {}, []
    for path, tokens in per_entry.items():
        before = [t.raw for t in kernel_args(tokens)]
        after = _grubby_words(tokens, present, absent, add)
        problems += [f"{path}: {p}" for p in unmet(before, after, present, absent)]
        planned[path] = after
    if problems:
        raise CmdlineError(
            f"the planned change of the BLS entries would be wrong: {'; '.join(problems)}; nothing was changed"
        )
    return planned


def _bls_final_texts(texts: dict[str, str], planned: dict[str, list[str]]) -> tuple[dict[str, str], set[str]]:
    """Every entry as the whole run leaves it, and the entries that take their arguments from grubenv.

    The module writes these texts itself, before grubby runs: check mode's diff, the files written and the files
    after grubby are one plan. An entry whose options are ``$kernelopts`` (RHEL 8) keeps them, only reshaped:
    grubby changes the arguments in grubenv there.
    """
    shared = {path for path, text in texts.items() if "$kernelopts" in bls.options_text(path, text)}
    final = {
        path: bls.normalized(text) if path in shared else bls.with_options(text, planned[path])
        for path, text in texts.items()
    }
    return final, shared


def _bls_commands(tool: str, remove: list[str], add: list[str], backs_up: list[str]) -> list[Action]:
    """grubby's two calls, removals first: grubby versions differ in the order they apply both options of one call,
    and one (the C grubby) removes by name, which would drop an argument the same call adds. grubby rewrites the
    entries, and depending on the version /etc/default/grub, /etc/kernel/cmdline and grubenv (kernelopts) too:
    every one is kept first and restored when anything fails afterwards."""
    actions = []
    if remove:
        argv = [tool, "--update-kernel=ALL", f"--remove-args={' '.join(remove)}"]
        actions.append(Action("command", f"remove {' '.join(remove)} from every boot entry", argv=argv))
    if add:
        argv = [tool, "--update-kernel=ALL", f"--args={' '.join(add)}"]
        actions.append(Action("command", f"add {' '.join(add)} to every boot entry", argv=argv))
    for action in actions:
        action.backs_up = backs_up
    return actions


def plan_bls(reader: HostReader, present: list[Arg], absent: list[Arg]) -> Plan:
    warnings: list[str] = []
    texts = bls_texts(reader)
    per_entry = bls_entries(reader, warnings, texts)
    remove, add = _bls_requests(per_entry, present, absent)
    planned = _prove_bls(per_entry, present, absent, add)
    entries = list(per_entry)
    newest = entries[-1]  # Fedora/RHEL entry names sort by kernel version
    tool = find_tool(reader, "grubby") or "/usr/sbin/grubby"
    actions: list[Action] = []
    final, shared = _bls_final_texts(texts, planned)
    if remove or add:
        # The entries as the run leaves them, written first in the one shape every grubby reads as the specification
        # does and writes itself (proven below, before grubby runs): grubby then only updates its other files.
        for path, text in texts.items():
            action = write_action(path, text, final[path], "options line as grubby leaves it")
            actions += [action] if action else []
        actions += _bls_commands(tool, remove, add, [*entries, *GRUBBY_TOUCHES])
    source = f"options of {newest} (grubby updates all {len(entries)} entries)"
    plan = Plan("bls", actions, [t.raw for t in per_entry[newest]], planned[newest], source)
    # grubby rewrites every entry when it changes one, which also fixes what GRUB alone misread.
    plan.warnings += [] if actions else warnings
    _bls_checks(plan, per_entry, (final, shared), newest, (present, absent))
    return plan


def _bls_checks(plan: Plan, per_entry: dict, final_shared: tuple, newest: str, request: tuple) -> None:
    """The entries must be byte for byte the plan once written and once grubby ran, and meet the request."""
    before_all = {path: [t.raw for t in kernel_args(args)] for path, args in per_entry.items()}
    (final, shared), (present, absent) = final_shared, request

    def differences(host_root: str) -> list[str]:
        again = bls_texts(HostReader(host_root))
        return [
            f"{path} says {_options_line(again.get(path))!r} instead of {_options_line(text)!r}"
            for path, text in final.items()
            if path not in shared and again.get(path) != text
        ]

    def readback(host_root: str, _run) -> list[str]:
        again = bls_entries(HostReader(host_root))
        problems = [f"{path}: entry removed" for path in before_all if path not in again]
        for path, args in again.items():
            raws = [t.raw for t in kernel_args(args)]
            problems += [f"{path}: {p}" for p in unmet(before_all.get(path, raws), raws, present, absent)]
        problems += differences(host_root)
        if problems:
            raise CmdlineError("; ".join(problems))
        return [t.raw for t in again.get(newest, [])]

    plan.readback = readback
    plan.before_tools = lambda executor: differences(executor.host_root)
    # Exact where the newest entry holds its own arguments; from grubenv (kernelopts) grubby decides the order.
    plan.exact = newest not in shared


def _options_line(text: str | None) -> str:
    if text is None:
        return "(no file)"
    lines = [line for _number, line, key, _value in bls.entry_lines(text) if key == "options"]
    return lines[0] if lines else "(no options line)"


# ------------------------------------------------------------------------------------------ kernel-install


def plan_kernel_install(reader: HostReader, present: list[Arg], absent: list[Arg]) -> Plan:
    path = "/etc/kernel/cmdline"
    text = read_boot_file(reader, path)
    if text is None:
        raise CmdlineError(f"boot setup 'kernel_install' needs {reader.path(path)}, which is missing")
    new = edit_cmdline(text, present, absent)
    if new and not new.endswith("\n"):
        new += "\n" if text.endswith("\n") or not text else ""
    before = [t.raw for t in tokenize(text)]
    after = [t.raw for t in tokenize(new)]
    action = write_action(path, text, new, "kernel-install command line")
    plan = Plan("kernel_install", [action] if action else [], before, after, path)
    plan.readback = lambda host_root, _run: [t.raw for t in tokenize(read_boot_file(HostReader(host_root), path) or "")]
    plan.before_tools = lambda executor: _readback_problems(plan, executor)[1]
    if action:
        _add_kernel_install(reader, plan, path)
    return plan


def _add_kernel_install(reader: HostReader, plan: Plan, path: str, env=None) -> None:
    release = (reader.read_text("/proc/sys/kernel/osrelease", record=False) or "").strip()
    tool = find_tool(reader, "kernel-install")
    argv = _kernel_install_add(reader, release) if tool else None
    if not (tool and argv):
        plan.warnings.append(
            f"{path} is read when a kernel is installed; no kernel-install or vmlinuz for the running "
            f"kernel {release or '(unknown)'} was found, so run 'kernel-install add' or reinstall the "
            "kernel for the change to reach the boot entry"
        )
        return
    # kernel-install runs with this process's environment (through chroot too), so it decides with it.
    layout = kernel_install_layout.detect(reader, tool, os.environ if env is None else env, image=argv[2])
    action = Action("command", f"regenerate the boot entry of {release}", argv=[tool, *argv])
    # kernel-install rewrites the running kernel's entry: the entries are kept and restored on failure, wherever
    # it keeps them (Debian mounts the ESP at /boot/efi), and the entry it will create is removed again.
    roots = dict.fromkeys([*loader_entry.BOOT_ROOTS, *([layout.boot_root] if layout.boot_root else [])])
    action.backs_up = [
        f"{boot}/loader/entries/{name}"
        for boot in roots
        for name in reader.listdir(f"{boot}/loader/entries") or []
        if name.endswith(".conf")
    ]
    if layout.writes_entry:
        tries = kernel_install_layout.first_line(reader, "/etc/kernel/tries")
        names = layout.entry_names(release, tries if tries and tries.isdigit() else None)
        action.backs_up += [f"{layout.boot_root}/loader/entries/{name}" for name in names]
    plan.actions.append(action)
    if layout.writes_entry and layout.token:
        plan.after_tools = _entry_check(plan, layout, release, tool)
    elif layout.writes_entry:
        plan.warnings.append(
            f"kernel-install writes a Type #1 entry into {layout.boot_root}/loader/entries ({layout.why()}), but names "
            "it after a machine ID it generates afresh on every run (no /etc/machine-id), so the entry could not be "
            "confirmed: initialize /etc/machine-id or set /etc/kernel/entry-token"
        )
    else:
        # other, uki or a bypass: kernel-install writes no Type #1 entry, by design; say so rather than fail.
        plan.warnings.append(
            f"kernel-install uses layout={layout.layout} on this host ({layout.why()}): it writes no Type #1 boot "
            "entry, so the new command line could not be confirmed in a loader entry; check what your boot loader "
            "reads. If systemd-boot reads Type #1 entries from an ESP that is not mounted, mount it (for example "
            "'mount /boot/efi') and run again"
        )


def _entry_check(plan: Plan, layout: kernel_install_layout.Layout, release: str, tool: str):
    """After ``kernel-install add`` on a ``bls`` layout: the running kernel's entry must carry the planned line.

    kernel-install exits 0 whatever its plugins did, so only the entry itself, where and under the name it was
    decided (:mod:`kernel_install_layout`), shows that the next boot gets the new line (:mod:`loader_entry`).
    """
    tokens, roots = [layout.token or ""], (layout.boot_root,)

    def problems(executor) -> list[str]:
        entries = loader_entry.find_entries(executor.host_root, tokens, release, roots)
        where = loader_entry.looked_in(tokens, release, roots)
        why = f"kernel-install decides layout=bls there: {layout.why()}"
        if not entries:
            return [
                f"'{tool} add' exited 0 but wrote no boot entry for {release}: looked for {where}; {why}. Check "
                "its plugins in /etc/kernel/install.d and /usr/lib/kernel/install.d (90-loaderentry.install writes "
                "the entry) and run 'kernel-install --verbose add' by hand"
            ]
        found = []
        for entry, options in entries:
            args = [t.raw for t in kernel_args(tokenize(options))] if options is not None else None
            wrong = ["unreadable"] if args is None else unmet(plan.configured, args, plan.present, plan.absent)
            found += [f"{entry} ({'; '.join(wrong)})"] if wrong else []
        if not found:
            return []
        planned = " ".join(plan.configured) or "(nothing)"
        return [
            f"'{tool} add' exited 0 but the boot entry does not carry the planned command line {planned}: "
            f"{', '.join(found)}; {why}"
        ]

    return problems


def _kernel_install_add(reader: HostReader, release: str) -> list[str] | None:
    """``kernel-install``'s arguments that regenerate the running kernel's entry, or None without its image.

    The image is where the distribution keeps it: ``/usr/lib/modules/<release>/vmlinuz`` (Fedora, Arch, ...) or
    Debian's ``/boot/vmlinuz-<release>``. Debian builds the initramfs outside kernel-install, so its own hook
    passes it (systemd-boot 252.39-1~deb12u2, ``/etc/initramfs/post-update.d/systemd-boot``:
    ``kernel-install add "$1" "/boot/vmlinuz-$1" "$2"``); an entry regenerated without it would not boot.
    """
    if not release or "/" in release:
        return None
    for directory in ("usr/lib/modules", "lib/modules"):
        if reader.isfile(f"/{directory}/{release}/vmlinuz"):
            return ["add", release, f"/{directory}/{release}/vmlinuz"]
    if not reader.isfile(f"/boot/vmlinuz-{release}"):
        return None
    initrd = f"/boot/initrd.img-{release}"
    return ["add", release, f"/boot/vmlinuz-{release}", *([initrd] if reader.isfile(initrd) else [])]


# ------------------------------------------------------------------------------------------ ostree / bootc


# ostree keeps a staged deployment in /run until shutdown finalizes it (ostree's sysroot, the file
# 'ostree admin deploy --stage' writes); a deployment written at once is a new loader entry instead.
OSTREE_STAGED = "/run/ostree/staged-deployment"
_OSTREE_KARG = re.compile(r"(?:^|\s)ostree=(\S+)")


def ostree_entries(reader: HostReader) -> dict[str, tuple[int, str]]:
    """Every ostree loader entry: path -> (its ``version``, its ``options`` text)."""
    found = {}
    for path in list_boot_dir(reader, "/boot/loader/entries", ".conf"):
        text = read_boot_file(reader, path) or ""
        version = re.search(r"^version\s+(\d+)", text, re.M)
        found[path] = (int(version.group(1)) if version else 0, _bls_options(path, text, None))
    return found


def ostree_pending(reader: HostReader) -> str | None:
    """Why a deployment other than the booted one will boot next (None: the booted one will).

    A staged deployment (``/run/ostree/staged-deployment``), or a default loader entry (the highest ``version``)
    whose ``ostree=`` is not the running kernel's (``/proc/cmdline``): what ``rpm-ostree status`` calls pending.
    """
    if reader.exists(OSTREE_STAGED):
        return f"{OSTREE_STAGED} exists (a staged deployment)"
    entries = ostree_entries(reader)
    if not entries:
        return None
    default = max(entries, key=lambda path: entries[path][0])
    running = _OSTREE_KARG.search(reader.read_text("/proc/cmdline", record=False) or "")
    configured = _OSTREE_KARG.search(entries[default][1])
    if running is None:
        return "the running deployment is unknown (/proc/cmdline has no ostree=)"
    if configured is None or configured.group(1) != running.group(1):
        return f"the default entry {default} is not the running deployment"
    return None


def plan_ostree(reader: HostReader, present: list[Arg], absent: list[Arg]) -> Plan:
    entries = ostree_entries(reader)
    default = max(entries, key=lambda path: entries[path][0]) if entries else None
    current = tokenize(entries[default][1]) if default else []
    edit = plan_edits(current, present, absent)
    after = apply_to_list(current, edit)
    args: list[str] = [f"--delete-if-present={current[i].raw}" for i in sorted(edit.deletes | set(edit.replaces))]
    args += [f"--append-if-missing={raw}" for raw in [*edit.replaces.values(), *edit.inserts]]
    plan = Plan("ostree", [], [t.raw for t in current], after, "default ostree deployment")
    if args:
        tool = find_tool(reader, "rpm-ostree")
        if tool is None:
            bootc = find_tool(reader, "bootc")
            hint = (
                "bootc hosts take kernel arguments from the image: add "
                f"/usr/lib/bootc/kargs.d/50-tee.toml with kargs = {[t.raw for t in present]!r} "
                "to the image build, or render a MachineConfig instead"
                if bootc
                else "install rpm-ostree or manage this host through its image"
            )
            raise CmdlineError(f"ostree host without rpm-ostree: {hint}")
        plan.actions.append(
            Action("command", "stage kernel arguments for the next deployment", argv=[tool, "kargs", *args])
        )

        def readback(_host_root: str, run) -> list[str]:
            rc, out, err = run([tool, "kargs"])
            if rc != 0:
                raise CmdlineError(f"'{tool} kargs' failed with exit code {rc}: {(err or out).strip()[:200]}")
            return [t.raw for t in tokenize(out if isinstance(out, str) else grub.decode(out))]

        plan.readback = readback
        plan.undo = _ostree_undo(tool, ostree_pending(reader))
        plan.exact = False
    return plan


def _ostree_undo(tool: str, pending_before: str | None):
    """Undo 'rpm-ostree kargs' when its result cannot be confirmed: the deployment it made must not boot.

    ``rpm-ostree cleanup --pending`` removes the pending deployment, staged or written (rpm-ostree(1): "-p,
    --pending: Remove pending deployment"). That is exactly the one 'kargs' made only when none was pending before
    the task; otherwise 'kargs' built on and replaced the earlier pending deployment (an update, say), which a
    cleanup would discard too, so that case is left to the administrator with the commands that undo it.
    """

    def undo(executor) -> str:
        if pending_before:
            return (
                f"; a deployment was already pending before this task ({pending_before}) and '{tool} kargs' replaced "
                "it with one carrying the new arguments, which boots next: nothing was removed. Undo the arguments "
                f"with '{tool} kargs' (the reverse --delete/--append) or discard both with '{tool} cleanup --pending'"
            )
        rc, out, err = executor.run_host_command([tool, "cleanup", "--pending"])
        if rc != 0:
            detail = (err or out or "no output").strip()[:200]
            return (
                f"; '{tool} cleanup --pending' failed with exit code {rc} ({detail}): the deployment with the new "
                f"arguments is still pending and boots next; run '{tool} cleanup --pending' by hand"
            )
        left = ostree_pending(HostReader(executor.host_root))
        if left:
            return (
                f"; '{tool} cleanup --pending' ran, but a deployment is still pending ({left}) and boots next; "
                f"check '{tool} status' and run '{tool} cleanup --pending' again"
            )
        return (
            f"; the deployment '{tool} kargs' made was removed again ('{tool} cleanup --pending', and none is "
            "pending now): the next boot is the running deployment, with the arguments it had"
        )

    return undo


# ------------------------------------------------------------------------------------------ entry points


@dataclass
class Request:
    """One caller's arguments (a role's), with the stem of its own GRUB drop-in."""

    name: str
    present: list[Arg]
    absent: list[Arg]


def parse_request(present: list, absent: list, where: str = "") -> tuple[list[Arg], list[Arg]]:
    want = [parse_arg(p, f"{where}present argument") for p in present]
    drop = [parse_arg(a, f"{where}absent argument") for a in absent]
    clash = {t.key for t in want} & {t.key for t in drop if t.value is None}
    if clash:
        raise CmdlineError(f"{where}{', '.join(sorted(clash))} requested both present and absent")
    return want, drop


def check_name(name: str, where: str = "name") -> None:
    if not isinstance(name, str) or not DROPIN_NAME_RE.match(name):
        raise CmdlineError(f"{where} {name!r} must be a file-name stem (letters, digits, '.', '_', '-')")
    if not fits(name + ".cfg"):
        raise CmdlineError(
            f"{where} {name[:40]!r}... has {len(name)} characters: the drop-in {name[:8]}....cfg must fit a file "
            "name (255 bytes, NAME_MAX); choose a shorter name"
        )


REQUEST_KEYS = ("name", "present", "absent")


def parse_requests(raw: object) -> list[Request]:
    """Validate the ``requests`` option: a non-empty list of ``{name, present, absent}`` with distinct names."""
    if not isinstance(raw, list) or not raw:
        raise CmdlineError("requests must be a non-empty list of {name, present, absent} dictionaries")
    requests: list[Request] = []
    for index, item in enumerate(raw):
        where = f"requests[{index}]"
        if not isinstance(item, dict) or "name" not in item or set(item) - set(REQUEST_KEYS):
            raise CmdlineError(f"{where} must be a dictionary with the keys name (required), present and absent")
        check_name(item["name"], f"{where}.name")
        where = f"requests[{index}] ({item['name']}): "
        for option in ("present", "absent"):
            problem = list_of_strings_problem(f"{where}{option}", item.get(option) or [])
            if problem:
                raise CmdlineError(problem)
        want, drop = parse_request(item.get("present") or [], item.get("absent") or [], where)
        requests.append(Request(item["name"], want, drop))
    names = Counter(request.name for request in requests)
    twice = sorted(name for name, count in names.items() if count > 1)
    if twice:
        raise CmdlineError(f"requests name the drop-in {', '.join(twice)} more than once: give each its own name")
    combine(requests)
    return requests


def _disagreement(wanting: Request, other: Request) -> str | None:
    """Why two requests cannot both be met (``other`` removes or sets differently what ``wanting`` wants), or None."""
    for want in wanting.present:
        for theirs in other.present:
            if want.key == theirs.key and not want.same_setting(theirs):
                return f"{wanting.name} wants {want.raw} but {other.name} wants {theirs.raw}"
        for drop in other.absent:
            if want.key == drop.key and drop.value in (None, want.value):
                return f"{wanting.name} wants {want.raw} present but {other.name} wants {drop.raw} absent"
    return None


def combine(requests: list[Request]) -> tuple[list[Arg], list[Arg]]:
    """Every request's arguments as one request; requests that contradict each other are refused."""
    problems = []
    for i, first in enumerate(requests):
        for second in requests[i + 1 :]:
            problem = _disagreement(wanting=first, other=second) or _disagreement(wanting=second, other=first)
            problems += [problem] if problem else []
    if problems:
        raise CmdlineError(f"the requests contradict each other: {'; '.join(problems)}; nothing was changed")
    present: list[Arg] = []
    absent: list[Arg] = []
    for request in requests:
        present += [arg for arg in request.present if not any(arg.same_setting(seen) for seen in present)]
        absent += [arg for arg in request.absent if arg.raw not in [seen.raw for seen in absent]]
    return present, absent


def plan(
    host_root: str,
    present: list[str],
    absent: list[str],
    name: str = "confidential-tee",
    setup: str = "auto",
    runner=run_bounded,
) -> Plan:
    """Parse the request, detect (or check) the boot setup and plan the actions."""
    check_name(name)
    want, drop = parse_request(present, absent)
    return plan_requests(host_root, [Request(name, want, drop)], setup, runner)


def plan_requests(host_root: str, requests: list[Request], setup: str = "auto", runner=run_bounded) -> Plan:
    """Plan several callers' requests as one change: every file they need written, the boot updated once.

    GRUB keeps one drop-in per request; the other setups hold one command line, edited with all of them at once.
    """
    want, drop = combine(requests)
    reader = HostReader(host_root)
    if setup == "auto":
        detected, found = detect_setup(reader)
        if detected is None:
            raise CmdlineError(
                f"no supported boot setup under host_root {host_root}: found {'; '.join(found)}. Supported: "
                "ostree/bootc (/run/ostree-booted), BLS with grubby, Debian/Ubuntu GRUB (/etc/default/grub), "
                "kernel-install (/etc/kernel/cmdline); set boot_setup explicitly if detection is wrong"
            )
        setup = detected
    planners = {
        "grub": lambda: plan_grub_requests(reader, requests, runner),
        "bls": lambda: plan_bls(reader, want, drop),
        "kernel_install": lambda: plan_kernel_install(reader, want, drop),
        "ostree": lambda: plan_ostree(reader, want, drop),
    }
    if setup not in planners:
        raise CmdlineError(f"unknown boot setup {setup!r}; choose one of auto, {', '.join(SETUPS)}")
    result = planners[setup]()
    result.present, result.absent = want, drop
    return result


def _readback_problems(result: Plan, executor: Executor) -> tuple[list[str] | None, list[str]]:
    """What the host's configuration says now, and why that is not what was planned (empty: as planned)."""
    try:
        after = result.readback(executor.host_root, executor.run_host_command)  # type: ignore[operator]
        problems = unmet(result.before, after, result.present, result.absent)
    except CmdlineError as exc:
        after, problems = None, [str(exc)]
    if after is not None and result.exact and after != result.configured:
        planned = " ".join(result.configured) or "(nothing)"
        problems.append(f"it reads {' '.join(after) or '(nothing)'} instead of {planned}")
    return after, problems


def verify(result: Plan, executor: Executor) -> None:
    """Read the configuration back after execution; restore the files and fail when it is not as planned."""
    if executor.check_mode or not result.actions or result.readback is None:
        return
    after, problems = _readback_problems(result, executor)
    if not problems and result.after_tools is not None:
        problems = result.after_tools(executor)  # type: ignore[operator]
    if problems:
        executor.rollback()
        note = executor.restored()
        if result.undo:  # a command changed the host outside its files: say what undoing it did, not "nothing"
            note = (note if executor.changes.restored_paths else "") + result.undo(executor)  # type: ignore[operator]
        raise CmdlineError(f"after the change {result.source} is not as planned: {'; '.join(problems)}{note}")
    result.configured = after


def running_cmdline(host_root: str) -> list[str] | None:
    result = HostReader(host_root).read("/proc/cmdline", record=False)
    if result.data is None:
        return None
    return [t.raw for t in tokenize(result.data.decode("latin-1"))]


def reboot_required(running: list[str] | None, present: list[str], absent: list[str]) -> bool:
    """True when the running kernel does not have what was requested (configured differs from running)."""
    if running is None:
        return False
    return not satisfied(running, [parse_arg(p) for p in present], [parse_arg(a) for a in absent])


def managed_running(running: list[str] | None, present: list[str], absent: list[str]) -> list[str] | None:
    """The running arguments this request is about; the rest of the line may carry credentials."""
    if running is None:
        return None
    keys = {parse_arg(raw).key for raw in [*present, *absent]}
    return [raw for raw in running if parse_arg_text(raw).key in keys]


# ------------------------------------------------------------------------------------------ execution

# Argument names that carry credentials (rd.iscsi.password, a token for a network boot): their values are secrets.
CREDENTIAL_NAME_RE = re.compile(r"(password|passwd|secret|token|credential)", re.IGNORECASE)


def credential_values(raws: list[str]) -> list[str]:
    """Values of the arguments in ``raws`` whose names say they carry credentials, for the recorder to hide."""
    values = []
    for raw in raws:
        arg = parse_arg_text(raw)
        if arg.value and CREDENTIAL_NAME_RE.search(arg.name):
            values.append(arg.value)
    return values


@dataclass
class Executor:
    """Hands a plan's actions to the one change recorder (:mod:`common.changes`) and applies them all or nothing.

    Files are written through symbolic links resolved inside ``host_root``, after a backup, atomically; the
    commands are recorded alongside them, with the files they rewrite themselves (grubby's entries), so that a
    failed command or a result :func:`verify` cannot confirm puts every file of the task back as it was.
    """

    host_root: str
    check_mode: bool
    run_command: object  # callable(argv) -> (rc, stdout, stderr)
    backup: bool = True
    done: list[dict] = field(default_factory=list)
    changes: Changes = field(init=False)

    def __post_init__(self) -> None:
        self.changes = Changes(self.host_root, self.check_mode, backup=self.backup, runner=self.run_command)

    @property
    def backups(self) -> list[str]:
        return [saved for saved in self.changes.backups if saved]

    def command_argv(self, argv: list[str]) -> list[str]:
        # Under a mounted host root the host's own tools must act on the host's files.
        root = os.path.abspath(self.host_root)
        return argv if root == "/" else ["chroot", root, *argv]

    def run_host_command(self, argv: list[str]):
        return self.run_command(self.command_argv(argv))  # type: ignore[operator]

    def record(self, action: Action) -> None:
        """Plan one action in the recorder (nothing happens yet)."""
        entry = action.as_dict()
        if action.kind == "command":
            argv = self.command_argv(action.argv or [])
            entry["argv"] = [display_text(arg) for arg in argv]
            self.changes.command(argv, action.description, touches=action.backs_up)
        else:
            content = action.content if action.kind == "write" else None
            self.changes.file(action.path or "", content, default_mode=action.mode)
        self.done.append(entry)

    def plan(self, result: Plan) -> None:
        """Record every action of the plan in the recorder (nothing happens yet; the diff can be rendered)."""
        for action in result.actions:
            self.record(action)
        self.changes.add_secrets(credential_values([*result.before, *result.configured]))

    def execute(self, result: Plan) -> None:
        """Apply the recorded plan (outside check mode): files first, proven where the files decide, then tools."""
        if not self.done and result.actions:
            self.plan(result)

        def prove_files() -> None:
            try:
                problems = result.before_tools(self)  # type: ignore[operator]
            except CmdlineError as exc:
                problems = [str(exc)]
            if problems:
                raise ChangeError(f"the files written are not as planned ({'; '.join(problems)}), so no tool was run")

        try:
            self.changes.apply(before_commands=prove_files if result.before_tools else None)
        except ChangeError as exc:
            raise CmdlineError(str(exc)) from None

    def rollback(self) -> None:
        """Put every file this task touched back as it was."""
        self.changes.rollback()

    def restored(self) -> str:
        return self.changes.restored()
