# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""The one interface of a boot setup: how a host's next boot gets its kernel arguments, and how to change them.

A boot setup (``grub``, ``bls``, ``kernel_install``, ``ostree``; one module each in this package) is a module
that satisfies :class:`BootSetup`:

* ``NAME``: the ``boot_setup`` value that chooses it;
* ``detect(host)``: whether the host's files say it is this setup, and what was looked at (for the message when
  no setup matches). :func:`boot.kernel_cmdline.detect_setup` asks every setup, in its detection order;
* ``plan(host, requests, runner)``: the :class:`Plan` that meets every request (:mod:`boot.requests`), proven on
  the planned files before anything is written. Nothing is written or run here: the plan's :class:`Action`\\ s
  take effect only through :mod:`boot.executor`;
* the plan's hooks, set by ``plan``: ``readback`` (what the configuration says after the run), ``before_tools``
  and ``after_tools`` (what is wrong with the written files before a tool runs, or with what a tool wrote), and
  ``undo`` (what undoes a tool's effect outside the files, such as rpm-ostree's new deployment).

This module holds that contract and the host-file helpers every setup shares; it imports no setup.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from ansible_collections.confidential.tee.plugins.module_utils.boot import grub_config
from ansible_collections.confidential.tee.plugins.module_utils.boot.requests import CmdlineError, Request
from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import FileRead, HostReader
from ansible_collections.confidential.tee.plugins.module_utils.common.validation import display_text
from ansible_collections.confidential.tee.plugins.module_utils.host.cmdline import Arg

if TYPE_CHECKING:
    from ansible_collections.confidential.tee.plugins.module_utils.boot.executor import Executor

BIN_DIRS = ("usr/local/sbin", "usr/local/bin", "usr/sbin", "usr/bin", "sbin", "bin")
MAX_BOOT_FILE = 1024 * 1024


@dataclass
class Detection:
    """Whether the host looks like one boot setup, and what was looked at (``/etc/default/grub present``)."""

    matches: bool
    found: list[str]


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
    # Read the configuration back after execution: (host, run_host_command) -> configured arguments. ``host`` is
    # a fresh reader of the host (HostReader.fresh), so the read-back's problems never mix with the plan's.
    readback: Callable[[HostReader, Callable], list[str]] | None = None
    # True where the planned list is exactly what the files will say; False where a tool (grubby,
    # rpm-ostree) decides the order itself and only the request and the unrelated arguments are checked.
    exact: bool = True
    present: list[Arg] = field(default_factory=list)
    absent: list[Arg] = field(default_factory=list)
    # Problems of the written files, checked after writing and before any tool (update-grub, kernel-install,
    # grubby) runs: (executor) -> [problem]. A tool only ever runs on files proven right.
    before_tools: Callable[[Executor], list[str]] | None = None
    # Problems of what the tools wrote, checked after they ran (kernel-install's entry): (executor) -> [problem].
    after_tools: Callable[[Executor], list[str]] | None = None
    # What undoes a command's effect outside the files when the result is not as planned (rpm-ostree's new
    # deployment): (executor) -> a sentence saying what was undone, or what is left and how to undo it.
    undo: Callable[[Executor], str] | None = None

    @property
    def changed(self) -> bool:
        return bool(self.actions)


class BootSetup(Protocol):
    """What every module of this package provides (a module satisfies it through its module-level names)."""

    NAME: str

    def detect(self, reader: HostReader) -> Detection: ...

    def plan(self, reader: HostReader, requests: list[Request], runner: Callable) -> Plan: ...


def write_action(path: str, before: str | None, after: str, what: str) -> Action | None:
    if before == after:
        return None
    verb = "create" if before is None else "update"
    return Action("write", f"{verb} {path} ({what})", path=path, content=after, before=before)


# ------------------------------------------------------------------------------------------ host files


def read_boot_bytes(reader: HostReader, path: str) -> FileRead:
    """A boot configuration file read within :data:`MAX_BOOT_FILE`, its problems left to the caller."""
    return reader.read(path, limit=MAX_BOOT_FILE, record=False)


def read_boot_file(reader: HostReader, path: str) -> str | None:
    """Text of a boot configuration file (bytes preserved), ``None`` when absent; unreadable is an error."""
    result = read_boot_bytes(reader, path)
    if not result.exists:
        return None
    if result.problem:
        raise CmdlineError(
            f"cannot read {result.path}: {result.problem.problem}; check the file, permissions or host_root"
        )
    return grub_config.decode(result.data or b"")


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


def present_or_absent(path: str, present: bool) -> str:
    """One line of what detection looked at (``/etc/default/grub present``)."""
    return f"{path} {'present' if present else 'absent'}"
