# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""The one place a boot setup's plan takes effect: all or nothing, read back, undone on any failure.

:class:`Executor` hands a :class:`~boot.setups.Plan`'s actions to the one change recorder (:mod:`common.changes`):
files first, proven by the setup's ``before_tools`` hook, then the tools. :func:`verify` reads the configuration
back through the setup's ``readback`` (and ``after_tools``) hook and, when it is not as planned, restores every
file of the task and runs the setup's ``undo``. Nothing here knows a boot setup by name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ansible_collections.confidential.tee.plugins.module_utils.boot.cmdline_edit import unmet
from ansible_collections.confidential.tee.plugins.module_utils.boot.requests import CmdlineError
from ansible_collections.confidential.tee.plugins.module_utils.boot.setups import Action, Plan
from ansible_collections.confidential.tee.plugins.module_utils.common.changes import ChangeError, Changes
from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import HostReader
from ansible_collections.confidential.tee.plugins.module_utils.common.validation import display_text
from ansible_collections.confidential.tee.plugins.module_utils.host.cmdline import parse_arg_text

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

    Files are written through symbolic links resolved inside the host's root, after a backup, atomically; the
    commands are recorded alongside them, with the files they rewrite themselves (grubby's entries), so that a
    failed command or a result :func:`verify` cannot confirm puts every file of the task back as it was.
    """

    host: HostReader  # the module's (host_reader.open_host); read-backs get host.fresh()
    check_mode: bool
    run_command: object  # callable(argv) -> (rc, stdout, stderr)
    backup: bool = True
    done: list[dict] = field(default_factory=list)
    changes: Changes = field(init=False)

    def __post_init__(self) -> None:
        self.changes = Changes(self.host.fresh(), self.check_mode, backup=self.backup, runner=self.run_command)

    @property
    def backups(self) -> list[str]:
        return [saved for saved in self.changes.backups if saved]

    def command_argv(self, argv: list[str]) -> list[str]:
        # Under a mounted host root the host's own tools must act on the host's files.
        return self.host.command(argv)

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
                problems = result.before_tools(self)
            except CmdlineError as exc:
                problems = [str(exc)]
            if problems:
                raise ChangeError(f"the files written are not as planned ({'; '.join(problems)}), so no tool was run")

        try:
            self.changes.apply(before_commands=prove_files if result.before_tools else None)
        except ChangeError as exc:
            raise CmdlineError(str(exc)) from None

    def readback_problems(self, result: Plan) -> tuple[list[str] | None, list[str]]:
        """What the host's configuration says now, and why that is not what was planned (empty: as planned)."""
        try:
            after = result.readback(self.host.fresh(), self.run_host_command)
            problems = unmet(result.before, after, result.present, result.absent)
        except CmdlineError as exc:
            after, problems = None, [str(exc)]
        if after is not None and result.exact and after != result.configured:
            planned = " ".join(result.configured) or "(nothing)"
            problems.append(f"it reads {' '.join(after) or '(nothing)'} instead of {planned}")
        return after, problems

    def rollback(self) -> None:
        """Put every file this task touched back as it was."""
        self.changes.rollback()

    def restored(self) -> str:
        return self.changes.restored()


def verify(result: Plan, executor: Executor) -> None:
    """Read the configuration back after execution; restore the files and fail when it is not as planned."""
    if executor.check_mode or not result.actions or result.readback is None:
        return
    after, problems = executor.readback_problems(result)
    if not problems and result.after_tools is not None:
        problems = result.after_tools(executor)
    if problems:
        executor.rollback()
        note = executor.restored()
        if result.undo:  # a command changed the host outside its files: say what undoing it did, not "nothing"
            note = (note if executor.changes.restored_paths else "") + result.undo(executor)
        raise CmdlineError(f"after the change {result.source} is not as planned: {'; '.join(problems)}{note}")
    result.configured = after
