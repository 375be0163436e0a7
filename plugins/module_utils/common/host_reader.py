# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""The one way this collection reads a host's files: under ``host_root``, bounded, never blocking.

Every module and every parser reads host files through :class:`HostReader`, so the rules below hold
everywhere and live in one place:

* Paths are joined under ``host_root`` and symbolic links are followed *inside* it, the way ``chroot``
  would: an absolute link target such as ``/etc/default/grub -> /srv/grub`` names ``<host_root>/srv/grub``,
  never the controller's or the DaemonSet container's own file.
* Only regular files are opened. A FIFO, socket, character or block device is reported without being
  opened (opening a FIFO for reading blocks until a writer appears; opening a device can have side
  effects), and the descriptor is checked again after ``open`` in case the file was swapped meanwhile.
  The one exception is :meth:`HostReader.read_at`, which reads one register from the kernel's ``msr`` and
  ``cpuid`` character devices (and from regular files standing in for them in simulated trees).
* Reads are bounded: more than ``limit`` bytes is a problem (or, where the caller allows it, a warning
  and the first ``limit`` bytes).
* Every oddity becomes a :class:`Problem` with the path (and line, where there is one): one record type
  for every reader in the collection. Nothing here raises on a bad host file.

Pure Python, standard library only: modules import it through AnsiballZ and ``teesim`` imports it too.
"""

from __future__ import annotations

import errno
import os
import stat

from ansible_collections.confidential.tee.plugins.module_utils.common.errors import refused_option
from ansible_collections.confidential.tee.plugins.module_utils.common.record import Record

# Linux gives up resolving a path after 40 symbolic links (ELOOP); so do we.
MAX_SYMLINKS = 40
DEFAULT_LIMIT = 64 * 1024

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


class Problem(Record):
    """One thing wrong with one file, or with one line of it."""

    __slots__ = ("line", "line_number", "path", "problem")

    def __init__(self, path: str, problem: str, line_number: int | None = None, line: str | None = None) -> None:
        self.path, self.problem, self.line_number, self.line = path, problem, line_number, line

    def describe(self) -> str:
        where = self.path if self.line_number is None else f"{self.path}:{self.line_number}"
        shown = "" if self.line is None else f" (line: {self.line!r})"
        return f"{where}: {self.problem}{shown}"

    def as_dict(self) -> dict:
        return {"path": self.path, "line_number": self.line_number, "line": self.line, "problem": self.problem}


class FileRead(Record):
    """The outcome of one read: ``data`` is ``None`` when the file is absent, refused or unreadable."""

    __slots__ = ("data", "exists", "path", "problem", "truncated")
    __hash__ = None  # type: ignore[assignment]

    def __init__(
        self,
        path: str,
        data: bytes | None = None,
        exists: bool = True,
        problem: Problem | None = None,
        truncated: bool = False,
    ) -> None:
        self.path, self.data, self.exists, self.problem, self.truncated = path, data, exists, problem, truncated

    @property
    def ok(self) -> bool:
        return self.data is not None and self.problem is None

    def text(self, errors: str = "replace") -> str | None:
        """UTF-8 text (undecodable bytes replaced by U+FFFD unless ``errors`` says otherwise)."""
        return None if self.data is None else self.data.decode("utf-8", errors)


def file_kind(mode: int) -> str:
    """Words for a file type, for messages (``a FIFO (named pipe)``)."""
    for test, words in _KINDS:
        if test(mode):
            return words
    return "a regular file" if stat.S_ISREG(mode) else "a special file"


class HostReader:
    """The host a task works on: its root, whether that is the live system, and every :class:`Problem` found.

    One object per module run (from :func:`open_host`), passed down to every function that reads or changes the
    host: nothing below a module builds its own. ``problems`` is the one list of what was wrong on this host.
    """

    def __init__(self, host_root: str = "/") -> None:
        self.host_root = host_root or "/"
        self._root_is_slash = os.path.realpath(self.host_root) == "/"
        self.problems: list[Problem] = []

    @property
    def is_live(self) -> bool:
        """True when the root is this machine's own ``/`` (programs run directly; the kernel's files are real)."""
        return self._root_is_slash

    def command(self, argv: list[str]) -> list[str]:
        """``argv`` as it must run against this host: as is on the live root, through ``chroot`` under a tree."""
        return list(argv) if self._root_is_slash else ["chroot", self.host_root, *argv]

    def fresh(self) -> HostReader:
        """The same host with an empty problem list, for a read-back that must not mix with the plan's problems."""
        return HostReader(self.host_root)

    # ------------------------------------------------------------------ paths

    def path(self, rel: str) -> str:
        """The path as the user knows it (``<host_root>/<rel>``), for messages and results."""
        return os.path.join(self.host_root, rel.lstrip("/"))

    def resolve(self, rel: str, follow_last: bool = True) -> str:
        """The real path of ``rel`` with every symbolic link resolved inside ``host_root``.

        Raises ``OSError(ELOOP)`` after :data:`MAX_SYMLINKS` links. Components that do not exist are kept
        as they are, so the caller's ``stat`` reports ``ENOENT`` on the right path.
        """
        if self._root_is_slash:
            return os.path.join("/", rel.lstrip("/"))
        pending = [part for part in rel.split("/") if part not in ("", ".")]
        resolved: list[str] = []
        followed = 0
        while pending:
            part = pending.pop(0)
            if part == "..":
                # ".." never climbs above host_root, as in a chroot.
                if resolved:
                    resolved.pop()
                continue
            candidate = os.path.join(self.host_root, *resolved, part)
            if (pending or follow_last) and os.path.islink(candidate):
                followed += 1
                if followed > MAX_SYMLINKS:
                    raise OSError(errno.ELOOP, "too many levels of symbolic links", self.path(rel))
                target = os.readlink(candidate)
                if target.startswith("/"):
                    resolved = []
                pending = [p for p in target.split("/") if p not in ("", ".")] + pending
                continue
            resolved.append(part)
        return os.path.join(self.host_root, *resolved)

    # ------------------------------------------------------------------ problems

    def note(self, path: str, problem: str, line_number: int | None = None, line: str | None = None) -> Problem:
        """Record a problem found by a parser in a file this reader read."""
        record = Problem(path, problem, line_number, line)
        self.problems.append(record)
        return record

    def _failed(self, result: FileRead, problem: str, record: bool) -> FileRead:
        result.problem = Problem(result.path, problem)
        if record:
            self.problems.append(result.problem)
        return result

    # ------------------------------------------------------------------ reading

    def read(
        self,
        rel: str,
        *,
        limit: int = DEFAULT_LIMIT,
        expected: bool = False,
        truncate: bool = False,
        record: bool = True,
    ) -> FileRead:
        """Read a regular file of at most ``limit`` bytes.

        Absent files are ``exists=False`` (a problem only when ``expected``). Over ``limit``: a problem and no
        data, unless ``truncate`` allows keeping the first ``limit`` bytes (then ``truncated`` is set and the
        problem is still recorded, as a warning). ``record=False`` leaves :attr:`problems` alone.
        """
        result = FileRead(self.path(rel))
        try:
            real = self.resolve(rel)
            before = os.stat(real)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR):
                result.exists = False
                return self._failed(result, "missing", record) if expected else result
            return self._failed(result, f"cannot be examined: {exc.strerror or exc}", record)
        if not stat.S_ISREG(before.st_mode):
            return self._failed(result, f"is {file_kind(before.st_mode)}, not a regular file: not opened", record)
        try:
            data = self._read_regular(real, limit)
        except _NotRegularError as exc:
            return self._failed(result, f"became {exc.args[0]} while being opened: not read", record)
        except OSError as exc:
            return self._failed(result, f"unreadable: {exc.strerror or exc}", record)
        if len(data) > limit:
            if not truncate:
                return self._failed(result, f"larger than {limit} bytes: not the file the kernel writes", record)
            result.truncated = True
            data = data[:limit]
            self._failed(result, f"larger than {limit} bytes: only the first {limit} were read", record)
        result.data = data
        return result

    @staticmethod
    def _read_regular(real: str, limit: int) -> bytes:
        # O_NONBLOCK: a FIFO swapped in after the stat above must not block the open.
        flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(real, flags)
        try:
            mode = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode):
                raise _NotRegularError(file_kind(mode))
            chunks: list[bytes] = []
            size = 0
            # sysfs and procfs hand out at most a page per read(): loop until EOF or past the limit.
            while size <= limit:
                chunk = os.read(fd, limit + 1 - size)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)

    def read_at(self, rel: str, offset: int, size: int, *, record: bool = True) -> FileRead:
        """Read exactly ``size`` bytes at ``offset`` from a register file such as ``/dev/cpu/0/msr``.

        The kernel's ``msr`` and ``cpuid`` drivers (``arch/x86/kernel/msr.c``, ``cpuid.c``) are character
        devices whose file position is the register index: the MSR number, or the CPUID leaf in the low and
        the subleaf in the high 32 bits. A read returns 8 (MSR) or 16 (CPUID) bytes per register. So this is
        the one place where a character device is opened, read with one ``pread`` in non-blocking mode, and
        closed; FIFOs, sockets and block devices are still refused unopened. A regular file (a simulated node
        tree) is read at the same offset, and a short read is a problem, never a partial value.
        """
        result = FileRead(self.path(rel))
        try:
            real = self.resolve(rel)
            mode = os.stat(real).st_mode
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR):
                result.exists = False
                return result
            return self._failed(result, f"cannot be examined: {exc.strerror or exc}", record)
        if not (stat.S_ISCHR(mode) or stat.S_ISREG(mode)):
            return self._failed(result, f"is {file_kind(mode)}, not a register file: not opened", record)
        flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(real, flags)
        except OSError as exc:
            return self._failed(result, f"cannot be opened: {exc.strerror or exc}", record)
        try:
            opened = os.fstat(fd).st_mode
            if not (stat.S_ISCHR(opened) or stat.S_ISREG(opened)):
                return self._failed(result, f"became {file_kind(opened)} while being opened: not read", record)
            data = os.pread(fd, size, offset)
        except OSError as exc:
            return self._failed(result, f"read at offset {offset:#x} failed: {exc.strerror or exc}", record)
        finally:
            os.close(fd)
        if len(data) != size:
            return self._failed(result, f"only {len(data)} of {size} bytes at offset {offset:#x}", record)
        result.data = data
        return result

    def read_text(self, rel: str, **kwargs) -> str | None:
        """UTF-8 text of a file (undecodable bytes replaced), ``None`` when absent or unreadable."""
        return self.read(rel, **kwargs).text()

    # ------------------------------------------------------------------ metadata

    def stat(self, rel: str, follow: bool = True):
        """``os.stat`` result, ``False`` when absent, ``None`` (with a problem) when it cannot be told."""
        try:
            real = self.resolve(rel, follow_last=follow)
            return os.stat(real) if follow else os.lstat(real)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR):
                return False
            self.note(self.path(rel), f"cannot be examined: {exc.strerror or exc}")
            return None

    def exists(self, rel: str) -> bool | None:
        result = self.stat(rel)
        return None if result is None else result is not False

    def isdir(self, rel: str) -> bool | None:
        result = self.stat(rel)
        return None if result is None else result is not False and stat.S_ISDIR(result.st_mode)

    def isfile(self, rel: str) -> bool | None:
        result = self.stat(rel)
        return None if result is None else result is not False and stat.S_ISREG(result.st_mode)

    def is_socket(self, rel: str) -> bool | None:
        result = self.stat(rel)
        return None if result is None else result is not False and stat.S_ISSOCK(result.st_mode)

    def is_executable(self, rel: str) -> bool:
        """A regular file with an execute bit, as a shell's PATH lookup would accept it."""
        result = self.stat(rel)
        return bool(result) and stat.S_ISREG(result.st_mode) and bool(result.st_mode & 0o111)

    def link_name(self, rel: str) -> str | None:
        """Last component of a symbolic link's target (sysfs ``driver``/``iommu_group`` links); ``None`` if no link."""
        try:
            return os.path.basename(os.readlink(self.resolve(rel, follow_last=False)).rstrip("/")) or None
        except OSError:
            return None

    def listdir(self, rel: str) -> list[str] | None:
        """Sorted entries of a directory: ``[]`` when absent, ``None`` (with a problem) when unreadable."""
        try:
            return sorted(os.listdir(self.resolve(rel)))
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR):
                return []
            self.note(self.path(rel), f"unreadable directory: {exc.strerror or exc}")
            return None


class _NotRegularError(OSError):
    """The file changed type between ``stat`` and ``open``."""


def local_host() -> HostReader:
    """The machine this code runs on, for writers whose files belong to no managed host.

    The fleet report and the cluster manifests are written on the controller (or wherever the task runs), at
    paths the user gave: no ``host_root`` option names a host there, so there is nothing for :func:`open_host`
    to guard.
    """
    return HostReader("/")


def open_host(module) -> HostReader:
    """The one ``host_root`` guard and the one place a module gets its :class:`HostReader`.

    ``module`` is an AnsibleModule or anything like it (``params['host_root']``, ``fail_json``): module_utils
    never imports ``ansible`` itself. A ``host_root`` that is not a directory fails the task, naming it.
    """
    host_root = module.params.get("host_root") or "/"
    if not os.path.isdir(host_root):
        module.fail_json(
            msg=f"host_root {host_root} is not a directory: point it at the host's root (/), the DaemonSet's host "
            "mount (for example /host) or a simulated node tree",
            **refused_option("host_root"),
        )
    return HostReader(host_root)
