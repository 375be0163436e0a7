# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""Boot setup ``bls``: Boot Loader Specification entries in ``/boot/loader/entries``, changed with grubby.

The module writes every entry as the whole run leaves it (the shape grubby writes, :mod:`boot.bls`), proves it,
and only then runs grubby, which keeps its other files (``/etc/default/grub``, ``/etc/kernel/cmdline``,
``grubenv``) in step; the entries are read back byte for byte before and after grubby.
"""

from __future__ import annotations

from ansible_collections.confidential.tee.plugins.module_utils.boot import bls as bls_spec
from ansible_collections.confidential.tee.plugins.module_utils.boot import grub_config as grub
from ansible_collections.confidential.tee.plugins.module_utils.boot.cmdline_edit import conflicts, unmet
from ansible_collections.confidential.tee.plugins.module_utils.boot.requests import (
    UNSAFE_ARG_RE,
    CmdlineError,
    Request,
    combine,
)
from ansible_collections.confidential.tee.plugins.module_utils.boot.setups import (
    Action,
    Detection,
    Plan,
    find_tool,
    list_boot_dir,
    read_boot_file,
    write_action,
)
from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import HostReader
from ansible_collections.confidential.tee.plugins.module_utils.common.process import run_bounded
from ansible_collections.confidential.tee.plugins.module_utils.host.cmdline import Arg, kernel_args, tokenize

NAME = "bls"
ENTRIES = "/boot/loader/entries"
GRUBENV = "/boot/grub2/grubenv"
# Files grubby rewrites besides the entries (grubby-bls: GRUB_CMDLINE_LINUX, /etc/kernel/cmdline, kernelopts).
GRUBBY_TOUCHES = (grub.GRUB_MAIN, "/etc/kernel/cmdline", GRUBENV)


def detect(reader: HostReader) -> Detection:
    """Entries in ``/boot/loader/entries`` and grubby to change them (checked after ostree, which has entries too)."""
    entries = list_boot_dir(reader, ENTRIES, ".conf")
    grubby = find_tool(reader, "grubby")
    found = [f"{ENTRIES}: {len(entries)} *.conf", "grubby " + (grubby or "not found")]
    return Detection(bool(entries and grubby), found)


def plan(reader: HostReader, requests: list[Request], runner=run_bounded) -> Plan:
    """The entries as grubby leaves them, written first, then grubby's calls; ``runner`` is not used here."""
    present, absent = combine(requests)
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
    result = Plan("bls", actions, [t.raw for t in per_entry[newest]], planned[newest], source)
    # grubby rewrites every entry when it changes one, which also fixes what GRUB alone misread.
    result.warnings += [] if actions else warnings
    _bls_checks(result, per_entry, (final, shared), newest, (present, absent))
    return result


def entry_options(path: str, text: str, grubenv: str | None, warnings: list[str] | None = None) -> str:
    """An entry's options as the boot loader reads them, ``$kernelopts`` taken from ``grubenv`` where it is set."""
    try:
        options = bls_spec.options_text(path, text, warnings)
    except bls_spec.BlsError as exc:
        raise CmdlineError(f"{exc}; nothing was changed") from None
    if "$kernelopts" in options and grubenv:
        # RHEL 8 keeps the shared arguments in grubenv and references them from each entry.
        for line in grubenv.splitlines():
            if line.startswith("kernelopts="):
                options = options.replace("$kernelopts", line.partition("=")[2].strip())
    return options


def bls_texts(reader: HostReader) -> dict[str, str]:
    entries = list_boot_dir(reader, ENTRIES, ".conf")
    if not entries:
        raise CmdlineError(f"boot setup 'bls' needs entries in {reader.path(ENTRIES)}")
    return {path: read_boot_file(reader, path) or "" for path in entries}


def bls_entries(reader: HostReader, warnings: list[str] | None = None, texts=None) -> dict[str, list[Arg]]:
    texts = bls_texts(reader) if texts is None else texts
    grubenv = read_boot_file(reader, GRUBENV)
    return {path: tokenize(entry_options(path, text, grubenv, warnings)) for path, text in texts.items()}


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
    shared = {path for path, text in texts.items() if "$kernelopts" in bls_spec.options_text(path, text)}
    final = {
        path: bls_spec.normalized(text) if path in shared else bls_spec.with_options(text, planned[path])
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


def _bls_checks(result: Plan, per_entry: dict, final_shared: tuple, newest: str, request: tuple) -> None:
    """The entries must be byte for byte the plan once written and once grubby ran, and meet the request."""
    before_all = {path: [t.raw for t in kernel_args(args)] for path, args in per_entry.items()}
    (final, shared), (present, absent) = final_shared, request

    def differences(host: HostReader) -> list[str]:
        again = bls_texts(host)
        return [
            f"{path} says {_options_line(again.get(path))!r} instead of {_options_line(text)!r}"
            for path, text in final.items()
            if path not in shared and again.get(path) != text
        ]

    def readback(host: HostReader, _run) -> list[str]:
        again = bls_entries(host)
        problems = [f"{path}: entry removed" for path in before_all if path not in again]
        for path, args in again.items():
            raws = [t.raw for t in kernel_args(args)]
            problems += [f"{path}: {p}" for p in unmet(before_all.get(path, raws), raws, present, absent)]
        problems += differences(host)
        if problems:
            raise CmdlineError("; ".join(problems))
        return [t.raw for t in again.get(newest, [])]

    result.readback = readback
    result.before_tools = lambda executor: differences(executor.host.fresh())
    # Exact where the newest entry holds its own arguments; from grubenv (kernelopts) grubby decides the order.
    result.exact = newest not in shared


def _options_line(text: str | None) -> str:
    if text is None:
        return "(no file)"
    lines = [line for _number, line, key, _value in bls_spec.entry_lines(text) if key == "options"]
    return lines[0] if lines else "(no options line)"
