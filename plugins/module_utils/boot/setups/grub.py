# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""Boot setup ``grub``: Debian/Ubuntu GRUB, ``/etc/default/grub`` and its ``grub.d`` drop-ins.

Each request keeps a drop-in of its own; arguments other files set are removed there only where evaluating the
files the way grub-mkconfig does (:mod:`boot.grub_config`) proves the removal. ``update-grub`` or
``grub-mkconfig`` then regenerates ``grub.cfg``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace

from ansible_collections.confidential.tee.plugins.module_utils.boot import grub_config as grub
from ansible_collections.confidential.tee.plugins.module_utils.boot.cmdline_edit import conflicts, unmet
from ansible_collections.confidential.tee.plugins.module_utils.boot.requests import CmdlineError, Request, combine
from ansible_collections.confidential.tee.plugins.module_utils.boot.setups import (
    Action,
    Detection,
    Plan,
    find_tool,
    present_or_absent,
    read_boot_bytes,
    read_boot_file,
    write_action,
)
from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import HostReader
from ansible_collections.confidential.tee.plugins.module_utils.common.process import run_bounded
from ansible_collections.confidential.tee.plugins.module_utils.host.cmdline import Arg, parse_arg_text

NAME = "grub"


def detect(reader: HostReader) -> Detection:
    """A host with ``/etc/default/grub`` (checked after ostree and BLS, whose hosts may have one too)."""
    found = bool(reader.isfile(grub.GRUB_MAIN))
    return Detection(found, [present_or_absent(grub.GRUB_MAIN, found)])


def plan(reader: HostReader, requests: list[Request], runner=run_bounded) -> Plan:
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
        result = read_boot_bytes(reader, path)
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
    result = Plan("grub", actions, before, after, "GRUB_CMDLINE_LINUX + GRUB_CMDLINE_LINUX_DEFAULT")

    def readback(host: HostReader, _run) -> list[str]:
        written = read_grub_files(host, list(files.dropins))
        return _evaluate(written, written.texts, runner)

    result.readback = readback
    result.before_tools = lambda executor: executor.readback_problems(result)[1]
    special = [raw for raw in after if grub.GRUB_SCRIPT_SPECIAL.search(raw)]
    if special:
        result.warnings.append(
            f"{' '.join(special)}: GRUB's own script parser treats $, \\, quotes and ; specially when it reads "
            "grub.cfg, so the kernel may not receive these exactly as configured"
        )
    if actions:
        _add_grub_regeneration(reader, result)
    return result


def _add_grub_regeneration(reader: HostReader, result: Plan) -> None:
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
        result.actions.append(action)
    else:
        result.warnings.append(
            "neither update-grub nor grub-mkconfig was found under host_root; the new arguments reach "
            "the boot menu only after the GRUB configuration is regenerated"
        )
