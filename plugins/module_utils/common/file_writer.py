# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""The one place configuration files change: recorded always, performed only outside check mode.

Files are written through symbolic links (the link's target, resolved inside ``host_root``), after a backup,
atomically (temporary file in the same directory, ``fsync``, ``rename``), with the owner, group and mode asked
for. A temporary file is created 0600 and gets its final mode before it is renamed, so a secret is never
readable by others, not even for a moment. Owners and groups are names from the *host's* ``/etc/passwd`` and
``/etc/group`` (under ``host_root``) or numbers.

Standard library only.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
import time
from dataclasses import dataclass, field

from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import HostReader


class WriteError(ValueError):
    """A write this module refuses (unknown owner, a directory in the way)."""


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
    raise WriteError(f"{kind} {name!r} does not exist in {reader.path('etc/' + database)}: create it first")


@dataclass
class FileWriter:
    host_root: str
    check_mode: bool
    backup: bool = True
    done: list[dict] = field(default_factory=list)
    backups: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.reader = HostReader(self.host_root)

    def apply(self, path: str, content: str | None, owner=None, group=None, mode: int | None = None) -> dict:
        """Make ``path`` hold ``content`` (``None``: remove it) with owner, group and mode; return the record."""
        real = self.reader.resolve(path)
        try:
            st = os.lstat(real)
        except FileNotFoundError:
            st = None
        if st is not None and not stat.S_ISREG(st.st_mode):
            raise WriteError(f"{self.reader.path(path)} exists and is not a regular file: not touched")
        uid, gid = lookup_id(self.reader, "passwd", owner), lookup_id(self.reader, "group", group)
        reasons = self._reasons(real, st, content, uid, gid, mode)
        record = {"path": path, "changed": bool(reasons), "reasons": reasons}
        if not reasons:
            return record
        self.done.append(record)
        if self.check_mode:
            return record
        if content is None:
            self._backup(real)
            os.unlink(real)
        elif "content" in reasons or "create" in reasons:
            self._backup(real)
            atomic_write(real, content, mode=mode, uid=uid, gid=gid)
        else:
            if uid is not None or gid is not None:
                os.chown(real, -1 if uid is None else uid, -1 if gid is None else gid)
            if mode is not None:
                os.chmod(real, mode)
        return record

    @staticmethod
    def _reasons(real, st, content, uid, gid, mode) -> list[str]:
        if content is None:
            return ["remove"] if st is not None else []
        if st is None:
            return ["create"]
        reasons = []
        with open(real, "rb") as handle:
            if handle.read() != content.encode("utf-8", "surrogateescape"):
                reasons.append("content")
        if uid is not None and st.st_uid != uid:
            reasons.append(f"owner {st.st_uid} -> {uid}")
        if gid is not None and st.st_gid != gid:
            reasons.append(f"group {st.st_gid} -> {gid}")
        if mode is not None and stat.S_IMODE(st.st_mode) != mode:
            reasons.append(f"mode {stat.S_IMODE(st.st_mode):04o} -> {mode:04o}")
        return reasons

    def _backup(self, real: str) -> None:
        if self.backup:
            saved = backup_file(real, _stamp())
            if saved:
                self.backups.append(saved)


def _stamp() -> str:
    return time.strftime("%Y-%m-%d@%H:%M:%S")


def backup_file(full_path: str, stamp: str) -> str | None:
    """Copy an existing file next to itself; the ``~`` suffix keeps it out of ``*.cfg``/``*.conf`` globs."""
    if not os.path.isfile(full_path):
        return None
    dest, n = f"{full_path}.{stamp}~", 1
    # Two runs within one second must not overwrite the earlier, older copy.
    while os.path.exists(dest):
        dest, n = f"{full_path}.{stamp}.{n}~", n + 1
    shutil.copy2(full_path, dest)
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
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogateescape")
    directory = os.path.dirname(real) or "."
    os.makedirs(directory, exist_ok=True)
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
