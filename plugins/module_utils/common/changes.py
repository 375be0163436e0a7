# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""The one change recorder: every file a task changes and every command it runs, planned, validated, then done.

A task *plans* all its changes first (:meth:`Changes.file`, :meth:`Changes.command`): the path, the bytes before
(read now), the bytes after (or removal), mode, owner, group, and whether the file is secret. Then the whole plan
is *validated* (owners and groups exist in the host's ``/etc/passwd`` and ``/etc/group`` under ``host_root``, no
directory or special file stands where a file goes, every missing parent can be created), and only then
*applied*: each file atomically (a 0600 temporary file in the same directory, ``fsync``, ``rename``), through
symbolic links resolved inside ``host_root`` the way :meth:`HostReader.resolve` does, after a ``<file>.<stamp>~``
backup, and read back and compared. When any write, command or read-back fails, every file of the task is put
back as it was (content, mode, owner), the files and directories the task created are removed, the backups it
made are removed, and the error says what failed.

Check mode and ``--diff`` come from the same plan: the diff's "after" is rendered from the very bytes a real run
writes (through links: the resolved target's content), and both sides are rendered the same way (bytes that are
not UTF-8 as ``\\xNN`` escapes). Every secret value the recorder was given, or that a secret file's ``find``
function extracts from its old or new content, is replaced by ``<redacted>`` in everything the recorder emits;
:meth:`Changes.redact` does the same to the module's own results and messages.

Standard library only.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import stat
import tempfile
import time
from dataclasses import dataclass, field

from ansible_collections.confidential.tee.plugins.module_utils.common.errors import TeeError
from ansible_collections.confidential.tee.plugins.module_utils.common.file_names import bounded_name
from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import HostReader

REDACTED = "<redacted>"
# A configuration file larger than this is not one this collection writes; refuse rather than hold it in memory.
MAX_FILE = 64 * 1024 * 1024


class ChangeError(TeeError):
    """A change the recorder refuses or could not complete; the message says what and what was restored."""


def lookup_id(reader: HostReader, database: str, name: str | int | None) -> int | None:
    """uid/gid of ``name`` in the host's ``etc/passwd`` or ``etc/group``; numbers are taken as they are."""
    if name is None:
        return None
    if isinstance(name, int) or str(name).isdigit():
        return int(name)
    text = reader.read_text(f"etc/{database}", limit=16 * 1024 * 1024, record=False) or ""
    for line in text.splitlines():
        fields = line.split(":")
        if len(fields) >= 3 and fields[0] == name and fields[2].isdigit():
            return int(fields[2])
    kind = "user" if database == "passwd" else "group"
    raise ChangeError(f"{kind} {name!r} does not exist in {reader.path('etc/' + database)}: create it first")


def show_bytes(data: bytes | None) -> str:
    """Text for a diff: UTF-8, and every byte that is not as a ``\\xNN`` escape (the same for both sides)."""
    return "" if data is None else data.decode("utf-8", "backslashreplace")


def _encode(content: bytes | str | None) -> bytes | None:
    if content is None or isinstance(content, bytes):
        return content
    return content.encode("utf-8", "surrogateescape")


@dataclass
class Snapshot:
    """A file as it was before the task touched it (``data`` ``None``: it did not exist)."""

    data: bytes | None
    mode: int | None = None
    uid: int | None = None
    gid: int | None = None


@dataclass
class FileChange:
    path: str  # as the host knows it (under host_root)
    after: bytes | None  # None: remove the file
    real: str = ""
    before: bytes | None = None
    mode: int | None = None
    owner: str | int | None = None
    group: str | int | None = None
    default_mode: int = 0o644
    secret: bool = False
    # Secret files: text -> the text with secrets replaced; raises when it cannot be sure (then a digest is shown).
    redactor: object = None
    reasons: list[str] = field(default_factory=list)
    uid: int | None = None
    gid: int | None = None
    problem: str | None = None  # found while planning, reported by validate()

    @property
    def changed(self) -> bool:
        return bool(self.reasons)

    def record(self) -> dict:
        return {"path": self.path, "changed": self.changed, "reasons": list(self.reasons)}


@dataclass
class CommandChange:
    argv: list[str]
    description: str
    touches: list[str] = field(default_factory=list)  # host paths the command rewrites itself


class Changes:
    """Plan file changes and commands, validate the plan, apply it all-or-nothing, render its diff."""

    def __init__(
        self,
        host: HostReader | None = None,
        check_mode: bool = False,
        *,
        backup: bool = True,
        secrets=(),
        runner=None,
        durable: bool = True,
    ) -> None:
        self.reader = _the_host(host)
        self.check_mode = check_mode
        self.backup = backup
        self.runner = runner  # callable(argv) -> (rc, stdout, stderr)
        self.durable = durable
        self.entries: list[FileChange | CommandChange] = []
        self.secrets: set[str] = set()
        self.backups: list[str] = []
        self.restored_paths: list[str] = []
        # No ':' (Ansible's backup_local stamp has them): FAT, where an EFI system partition's loader entries
        # live, refuses ':' in a name (EINVAL), and a backup that cannot be made stops the task.
        self.stamp = time.strftime("%Y-%m-%d@%H-%M-%S")
        self._snapshots: dict[str, Snapshot] = {}
        self._created_dirs: list[str] = []
        self._backed_up: set[str] = set()
        self._applied = False
        self.add_secrets(secrets)

    # ------------------------------------------------------------------ secrets

    def add_secrets(self, values) -> None:
        """Values never to be shown; strings only, empty ones ignored."""
        for value in values or ():
            if isinstance(value, str) and value:
                self.secrets.add(value)

    def redact(self, value):
        """``value`` (a string, or dicts and lists of them) with every known secret replaced."""
        if isinstance(value, str):
            for secret in sorted(self.secrets, key=len, reverse=True):
                value = value.replace(secret, REDACTED)
            return value
        if isinstance(value, dict):
            return {key: self.redact(item) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.redact(item) for item in value]
        return value

    # ------------------------------------------------------------------ planning

    def real_path(self, path: str) -> str:
        """Where ``path`` really is: links resolved inside host_root (by the kernel itself when that is ``/``)."""
        if self.reader.is_live:
            return os.path.realpath(os.path.join("/", path.lstrip("/")))
        return self.reader.resolve(path)

    def display(self, path: str) -> str:
        return self.reader.path(path)

    def file(
        self,
        path: str,
        content: bytes | str | None,
        *,
        mode: int | None = None,
        owner: str | int | None = None,
        group: str | int | None = None,
        default_mode: int = 0o644,
        secret: bool = False,
        redactor=None,
        find_secrets=None,
    ) -> FileChange:
        """Plan ``path`` to hold ``content`` (``None``: removed); ``find_secrets(text)`` lists values to hide."""
        change = FileChange(path, _encode(content), mode=mode, owner=owner, group=group, secret=secret)
        change.default_mode = 0o600 if secret and mode is None else default_mode
        change.redactor = redactor
        self.entries.append(change)
        try:
            change.real = self.real_path(path)
            st = os.lstat(change.real)
        except FileNotFoundError:
            st = None
        except OSError as exc:
            if exc.errno == errno.ENOTDIR:
                st = None  # a parent is a file: validate() names it
            else:
                change.problem = f"{self.display(path)} cannot be examined: {exc.strerror or exc}"
                return change
        if st is not None and not stat.S_ISREG(st.st_mode):
            change.problem = f"{self.display(path)} exists and is not a regular file: not touched"
            return change
        if st is not None:
            change.before = self._read(change.real)
        if find_secrets is not None:
            for data in (change.before, change.after):
                if data is not None:
                    self.add_secrets(find_secrets(data.decode("utf-8", "surrogateescape")))
        try:
            change.uid = lookup_id(self.reader, "passwd", owner)
            change.gid = lookup_id(self.reader, "group", group)
        except ChangeError as exc:
            change.problem = str(exc)
            return change
        change.reasons = _reasons(change, st)
        return change

    @staticmethod
    def _read(real: str) -> bytes:
        with open(real, "rb") as handle:
            data = handle.read(MAX_FILE + 1)
        if len(data) > MAX_FILE:
            raise ChangeError(f"{real} is larger than {MAX_FILE} bytes: not a file this collection writes")
        return data

    def command(self, argv: list[str], description: str, touches=()) -> CommandChange:
        """Plan a command; ``touches`` are the host paths it rewrites (kept, backed up, restored on failure)."""
        change = CommandChange(list(argv), description, list(touches))
        self.entries.append(change)
        return change

    @property
    def files(self) -> list[FileChange]:
        return [entry for entry in self.entries if isinstance(entry, FileChange)]

    @property
    def changed(self) -> bool:
        return any(isinstance(e, CommandChange) or e.changed for e in self.entries)

    # ------------------------------------------------------------------ validation

    def validate(self) -> None:
        """Refuse the whole plan, before anything is written, when any planned change cannot be made."""
        problems = [change.problem for change in self.files if change.problem]
        for change in self.files:
            if change.problem or change.after is None or not change.changed:
                continue
            blocker = _parent_blocker(os.path.dirname(change.real))
            if blocker:
                problems.append(
                    f"{self.display(change.path)} cannot be written: {blocker} is in the way of its directory"
                )
        if problems:
            raise ChangeError(self.redact("; ".join(problems) + "; nothing was changed"))

    # ------------------------------------------------------------------ applying

    def apply(self, before_commands=None) -> None:
        """Validate, then make every planned change (outside check mode); all or nothing.

        Files are written before any command runs. ``before_commands`` (a callable raising :class:`ChangeError`)
        proves the written files before the first command: a host tool (update-grub, kernel-install) runs only
        on files already known to be right, and a failed proof restores them without having run anything.
        """
        self.validate()
        if self.check_mode:
            return
        self._applied = True
        files = [entry for entry in self.entries if isinstance(entry, FileChange)]
        commands = [entry for entry in self.entries if isinstance(entry, CommandChange)]
        for entry in files:
            self._step(entry, lambda entry=entry: self._write(entry) if entry.changed else None)
        if commands and before_commands is not None:
            self._step(None, before_commands)
        for entry in commands:
            self._step(entry, lambda entry=entry: self._run(entry))

    def _step(self, entry, action) -> None:
        """Run one step of :meth:`apply`; any failure (of any type) restores every file of the task."""
        try:
            action()
        except Exception as exc:  # whatever failed, the host must not be left half-changed
            if isinstance(entry, CommandChange):
                what = " ".join(entry.argv) + " "
            elif entry is None:
                what = "before running any command: "
            else:
                what = self.display(entry.path) + ": "
            self.rollback()
            raise ChangeError(self.redact(f"{what}{exc}{self.restored()}")) from None

    def _keep(self, path: str, real: str) -> None:
        """Remember a file as it was before the task touched it, and back it up, once per run."""
        if real in self._snapshots:
            return
        try:
            st = os.stat(real)
        except FileNotFoundError:
            self._snapshots[real] = Snapshot(None)
            return
        if not stat.S_ISREG(st.st_mode):
            return
        self._snapshots[real] = Snapshot(self._read(real), stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid)
        if self.backup and real not in self._backed_up:
            self._backed_up.add(real)
            self.backups.append(backup_file(real, self.stamp))

    def _write(self, change: FileChange) -> None:
        self._keep(change.path, change.real)
        if change.after is None:
            os.unlink(change.real)
            return
        if "create" in change.reasons or "content" in change.reasons:
            _make_parents(os.path.dirname(change.real), self._created_dirs)
            atomic_write(
                change.real,
                change.after,
                mode=change.mode,
                uid=change.uid,
                gid=change.gid,
                default_mode=change.default_mode,
                durable=self.durable,
            )
        else:
            if change.uid is not None or change.gid is not None:
                os.chown(
                    change.real, -1 if change.uid is None else change.uid, -1 if change.gid is None else change.gid
                )
            if change.mode is not None:
                os.chmod(change.real, change.mode)
        _verify(change)

    def _run(self, change: CommandChange) -> None:
        for path in change.touches:
            self._keep(path, self.real_path(path))
        if self.runner is None:
            raise ChangeError("no way to run commands was given")
        rc, out, err = self.runner(change.argv)  # type: ignore[operator]
        if rc != 0:
            detail = (err or out or "").strip().splitlines()[-1:] or ["no output"]
            raise ChangeError(f"failed with exit code {rc}: {detail[0]}")

    def rollback(self) -> None:
        """Put every file the task touched back as it was; remove what it created, and its backups."""
        for real, snapshot in reversed(list(self._snapshots.items())):
            try:
                if snapshot.data is None:
                    if os.path.lexists(real):
                        os.unlink(real)
                else:
                    # Owners can only be given back by root; anyone else never changed them.
                    owner = (snapshot.uid, snapshot.gid) if os.geteuid() == 0 else (None, None)
                    atomic_write(real, snapshot.data, mode=snapshot.mode, uid=owner[0], gid=owner[1])
                self.restored_paths.append(real)
            except OSError:
                continue  # restore what can be restored; the message lists what was
        for directory in reversed(self._created_dirs):
            with contextlib.suppress(OSError):  # not empty: something else put a file there meanwhile
                os.rmdir(directory)
        for saved in self.backups:
            if saved and os.path.lexists(saved):
                os.unlink(saved)
        self.backups = []
        self._created_dirs = []

    def restored(self) -> str:
        if not self.restored_paths:
            return "; nothing had been changed yet"
        return f"; every file of the task was restored as it was ({', '.join(self.restored_paths)})"

    # ------------------------------------------------------------------ presentation

    def shown(self, change: FileChange, data: bytes | None) -> str:
        """One side of a file's diff, redacted; a secret file that cannot be redacted surely shows a digest."""
        text = show_bytes(data)
        if change.secret and data is not None:
            try:
                text = change.redactor(text) if change.redactor else None  # type: ignore[operator]
            except Exception:  # any failure to redact means: show nothing of it
                text = None
            if text is None:
                return f"(secret file: content not shown, sha256 {hashlib.sha256(data).hexdigest()})\n"
        return self.redact(text)

    def diff(self) -> list[dict]:
        """``--diff`` entries for every file that changes, from the plan (what a real run writes)."""
        return [
            {
                "before_header": self.display(change.path),
                "after_header": self.display(change.path),
                "before": self.shown(change, change.before),
                "after": self.shown(change, change.after),
            }
            for change in self.files
            if change.changed
        ]

    def records(self) -> list[dict]:
        return [self.redact(change.record()) for change in self.files]


def _the_host(host: HostReader | None) -> HostReader:
    """The host a recorder changes: the module's own (from ``open_host``), passed down; never a root string."""
    if not isinstance(host, HostReader):
        raise TypeError("Changes needs the host it changes: open_host(module), or local_host() for the controller")
    return host


def _reasons(change: FileChange, st) -> list[str]:
    if change.after is None:
        return ["remove"] if st is not None else []
    if st is None:
        return ["create"]
    reasons = []
    if change.before != change.after:
        reasons.append("content")
    if change.uid is not None and st.st_uid != change.uid:
        reasons.append(f"owner {st.st_uid} -> {change.uid}")
    if change.gid is not None and st.st_gid != change.gid:
        reasons.append(f"group {st.st_gid} -> {change.gid}")
    if change.mode is not None and stat.S_IMODE(st.st_mode) != change.mode:
        reasons.append(f"mode {stat.S_IMODE(st.st_mode):04o} -> {change.mode:04o}")
    return reasons


def _parent_blocker(directory: str) -> str | None:
    """The first existing ancestor of ``directory`` when it is not a directory (so nothing can be made there)."""
    while True:
        try:
            st = os.stat(directory)
        except FileNotFoundError:
            parent = os.path.dirname(directory)
            if parent == directory:
                return None
            directory = parent
            continue
        except NotADirectoryError:
            directory = os.path.dirname(directory)
            continue
        return None if stat.S_ISDIR(st.st_mode) else f"{directory} (a file, not a directory)"


def _make_parents(directory: str, created: list[str]) -> None:
    """Create the missing directories above a file (0755), outermost first, adding each to ``created`` as made."""
    missing = []
    while not os.path.isdir(directory):
        missing.append(directory)
        directory = os.path.dirname(directory)
    for path in reversed(missing):
        os.mkdir(path, 0o755)
        created.append(path)


def _verify(change: FileChange) -> None:
    """Read the written file back; a difference is a failure (and the task is rolled back)."""
    st = os.stat(change.real)
    with open(change.real, "rb") as handle:
        if change.after is not None and handle.read() != change.after:
            raise ChangeError("read back, the file does not hold what was written")
    if change.mode is not None and stat.S_IMODE(st.st_mode) != change.mode:
        raise ChangeError(f"read back, its mode is {stat.S_IMODE(st.st_mode):04o}, not {change.mode:04o}")
    if change.uid is not None and st.st_uid != change.uid:
        raise ChangeError(f"read back, its owner is {st.st_uid}, not {change.uid}")
    if change.gid is not None and st.st_gid != change.gid:
        raise ChangeError(f"read back, its group is {st.st_gid}, not {change.gid}")


def _backup_path(full_path: str, stamp: str) -> str:
    """``<file>.<stamp>~``; beside a long file name, shortened to fit NAME_MAX (with a digest: still unique)."""
    directory, base = os.path.split(full_path)
    return os.path.join(directory, bounded_name(f"{base}.{stamp}", "~"))


def backup_file(full_path: str, stamp: str) -> str | None:
    """Copy an existing file next to itself; the ``~`` suffix keeps it out of ``*.cfg``/``*.conf`` globs."""
    if not os.path.isfile(full_path):
        return None
    dest, n = _backup_path(full_path, stamp), 1
    # Two runs within one second must not overwrite the earlier, older copy.
    while os.path.exists(dest):
        dest, n = _backup_path(full_path, f"{stamp}.{n}"), n + 1
    st = os.stat(full_path)
    with open(full_path, "rb") as source:
        data = source.read()
    # The copy keeps the original's mode from its first byte: a backup of a 0600 secret is never readable by others.
    atomic_write(dest, data, mode=stat.S_IMODE(st.st_mode), durable=False)
    if os.geteuid() == 0:
        os.chown(dest, st.st_uid, st.st_gid)
    return dest


def atomic_write(
    real: str,
    data: bytes | str,
    *,
    mode: int | None = None,
    uid: int | None = None,
    gid: int | None = None,
    default_mode: int = 0o644,
    durable: bool = True,
) -> None:
    """Replace ``real`` (an already resolved path) in one rename; a reader sees the old or the new file.

    Without ``mode``/``uid``/``gid`` an existing file keeps its own (owner only when running as root); a new
    file gets ``default_mode``. The temporary file is 0600 until its final mode, so a secret never leaks.
    ``durable=False`` skips the ``fsync`` for files a later run regenerates anyway (reports).
    """
    data = _encode(data) or b""
    directory = os.path.dirname(real) or "."
    try:
        st = os.stat(real)
    except FileNotFoundError:
        st = None
    final_mode = mode if mode is not None else (stat.S_IMODE(st.st_mode) if st else default_mode)
    keep_owner = st is not None and os.geteuid() == 0
    final_uid = uid if uid is not None else (st.st_uid if keep_owner else -1)
    final_gid = gid if gid is not None else (st.st_gid if keep_owner else -1)
    fd, tmp = tempfile.mkstemp(prefix=".tee-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        if final_uid != -1 or final_gid != -1:
            os.chown(tmp, final_uid, final_gid)
        os.chmod(tmp, final_mode)
        os.replace(tmp, real)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
