# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""Boot setup ``ostree``: ostree and bootc hosts, whose kernel arguments belong to a deployment.

``rpm-ostree kargs`` stages a new deployment with the changed arguments; its result is read back with
``rpm-ostree kargs``, and when that fails or disagrees the deployment is removed again (``rpm-ostree cleanup
--pending``) where it is the one this task made.
"""

from __future__ import annotations

import re

from ansible_collections.confidential.tee.plugins.module_utils.boot import grub_config as grub
from ansible_collections.confidential.tee.plugins.module_utils.boot.cmdline_edit import apply_to_list, plan_edits
from ansible_collections.confidential.tee.plugins.module_utils.boot.requests import CmdlineError, Request, combine
from ansible_collections.confidential.tee.plugins.module_utils.boot.setups import (
    Action,
    Detection,
    Plan,
    find_tool,
    list_boot_dir,
    present_or_absent,
    read_boot_file,
)
from ansible_collections.confidential.tee.plugins.module_utils.boot.setups.bls import ENTRIES, entry_options
from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import HostReader
from ansible_collections.confidential.tee.plugins.module_utils.common.process import run_bounded
from ansible_collections.confidential.tee.plugins.module_utils.host.cmdline import tokenize

NAME = "ostree"
BOOTED = "/run/ostree-booted"
# ostree keeps a staged deployment in /run until shutdown finalizes it (ostree's sysroot, the file
# 'ostree admin deploy --stage' writes); a deployment written at once is a new loader entry instead.
OSTREE_STAGED = "/run/ostree/staged-deployment"
_OSTREE_KARG = re.compile(r"(?:^|\s)ostree=(\S+)")


def ostree_entries(reader: HostReader) -> dict[str, tuple[int, str]]:
    """Every ostree loader entry: path -> (its ``version``, its ``options`` text)."""
    found = {}
    for path in list_boot_dir(reader, ENTRIES, ".conf"):
        text = read_boot_file(reader, path) or ""
        version = re.search(r"^version\s+(\d+)", text, re.M)
        found[path] = (int(version.group(1)) if version else 0, entry_options(path, text, None))
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


def detect(reader: HostReader) -> Detection:
    """An ostree-booted host (checked first: it has BLS entries, and maybe GRUB files, that ostree owns)."""
    found = bool(reader.exists(BOOTED))
    return Detection(found, [present_or_absent(BOOTED, found)])


def plan(reader: HostReader, requests: list[Request], runner=run_bounded) -> Plan:
    """``rpm-ostree kargs`` with the edit of the default deployment's arguments; ``runner`` is not used here."""
    present, absent = combine(requests)
    entries = ostree_entries(reader)
    default = max(entries, key=lambda path: entries[path][0]) if entries else None
    current = tokenize(entries[default][1]) if default else []
    edit = plan_edits(current, present, absent)
    after = apply_to_list(current, edit)
    args: list[str] = [f"--delete-if-present={current[i].raw}" for i in sorted(edit.deletes | set(edit.replaces))]
    args += [f"--append-if-missing={raw}" for raw in [*edit.replaces.values(), *edit.inserts]]
    result = Plan("ostree", [], [t.raw for t in current], after, "default ostree deployment")
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
        result.actions.append(
            Action("command", "stage kernel arguments for the next deployment", argv=[tool, "kargs", *args])
        )

        def readback(_host: HostReader, run) -> list[str]:
            rc, out, err = run([tool, "kargs"])
            if rc != 0:
                raise CmdlineError(f"'{tool} kargs' failed with exit code {rc}: {(err or out).strip()[:200]}")
            return [t.raw for t in tokenize(out if isinstance(out, str) else grub.decode(out))]

        result.readback = readback
        result.undo = _ostree_undo(tool, ostree_pending(reader))
        result.exact = False
    return result


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
        left = ostree_pending(executor.host.fresh())
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
