# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""Whether a given user can connect() to a Unix socket, decided the way the kernel decides it.

``connect()`` on an ``AF_UNIX`` path resolves the path (search permission, ``MAY_EXEC``, on every directory
walked, symbolic links followed) and then needs write permission (``MAY_WRITE``) on the socket inode
(``net/unix/af_unix.c`` ``unix_find_bsd``). Permission is ``fs/namei.c`` ``generic_permission``: a POSIX ACL
(``system.posix_acl_access``) when there is one (``fs/posix_acl.c`` ``posix_acl_permission``), else the mode bits
for owner, group (primary or supplementary) or others; root passes with ``CAP_DAC_OVERRIDE``. SELinux and
AppArmor are not modelled.

:func:`probe_as` then asks the real kernel: a forked child takes the user's uid, gid and groups and connects.

Standard library only.
"""

from __future__ import annotations

import errno
import os
import select
import socket
import stat
import struct
from dataclasses import dataclass, field

from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import HostReader

MAY_EXEC, MAY_WRITE, MAY_READ = 1, 2, 4
SUN_PATH_MAX = 107  # sizeof(sun_path) - 1
_ACL_USER_OBJ, _ACL_USER, _ACL_GROUP_OBJ, _ACL_GROUP, _ACL_MASK, _ACL_OTHER = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20


@dataclass
class Identity:
    name: str
    uid: int
    gid: int
    groups: list[int] = field(default_factory=list)

    def in_group(self, gid: int) -> bool:
        return gid == self.gid or gid in self.groups


def host_identity(reader, user: str) -> Identity | None:
    """``user`` as the host's ``etc/passwd`` and ``etc/group`` (under ``host_root``) define it, or ``None``.

    The names of the machine running the check do not apply to a mounted host: only the host's own files do."""
    passwd = reader.read_text("etc/passwd", limit=16 * 1024 * 1024, record=False) or ""
    for line in passwd.splitlines():
        fields = line.split(":")
        if len(fields) >= 4 and fields[0] == user and fields[2].isdigit() and fields[3].isdigit():
            uid, gid = int(fields[2]), int(fields[3])
            break
    else:
        return None
    groups = []
    for line in (reader.read_text("etc/group", limit=16 * 1024 * 1024, record=False) or "").splitlines():
        fields = line.split(":")
        if len(fields) >= 4 and fields[2].isdigit() and user in fields[3].split(","):
            groups.append(int(fields[2]))
    return Identity(user, uid, gid, groups)


def parse_acl(data: bytes) -> list[tuple[int, int, int]] | None:
    """Entries ``(tag, perm, id)`` of a ``system.posix_acl_access`` value (version 2), ``None`` if malformed."""
    if len(data) < 4 or (len(data) - 4) % 8 or struct.unpack_from("<I", data)[0] != 2:
        return None
    return [struct.unpack_from("<HHI", data, offset) for offset in range(4, len(data), 8)]


def acl_permits(entries: list[tuple[int, int, int]], st: os.stat_result, who: Identity, want: int) -> bool:
    """``posix_acl_permission``: owner entry, named users, then groups (masked), then others."""
    mask = next((perm for tag, perm, _id in entries if tag == _ACL_MASK), 7)
    for tag, perm, ident in entries:
        if tag == _ACL_USER_OBJ and st.st_uid == who.uid:
            return perm & want == want
        if tag == _ACL_USER and ident == who.uid:
            return perm & mask & want == want
    found_group = False
    for tag, perm, ident in entries:
        matches = (tag == _ACL_GROUP_OBJ and who.in_group(st.st_gid)) or (tag == _ACL_GROUP and who.in_group(ident))
        if matches:
            found_group = True
            if perm & mask & want == want:
                return True
    if found_group:
        return False
    return any(tag == _ACL_OTHER and perm & want == want for tag, perm, _id in entries)


def mode_permits(st: os.stat_result, who: Identity, want: int) -> bool:
    mode = st.st_mode
    if st.st_uid == who.uid:
        bits = (mode >> 6) & 7
    elif who.in_group(st.st_gid):
        bits = (mode >> 3) & 7
    else:
        bits = mode & 7
    return bits & want == want


def _acl_of(path: str) -> list[tuple[int, int, int]] | None:
    try:
        data = os.getxattr(path, "system.posix_acl_access", follow_symlinks=False)
    except (OSError, AttributeError):
        return None
    return parse_acl(data)


def permitted(path: str, st: os.stat_result, who: Identity, want: int) -> tuple[bool, str]:
    """``(allowed, why)`` for one inode."""
    if who.uid == 0:
        return True, "root (CAP_DAC_OVERRIDE)"
    acl = _acl_of(path)
    if acl:
        allowed = acl_permits(acl, st, who, want)
        return allowed, "POSIX ACL"
    return mode_permits(st, who, want), f"mode {stat.S_IMODE(st.st_mode):04o} owner {st.st_uid} group {st.st_gid}"


def can_connect(host: HostReader, socket_path: str, who: Identity) -> dict:
    """The kernel's verdict for ``who`` connecting to ``socket_path`` (a path on the host, under its root)."""
    return _can_reach(host, socket_path, who, MAY_WRITE)


def can_read(host: HostReader, path: str, who: Identity) -> dict:
    """The kernel's verdict for ``who`` opening the regular file ``path`` for reading (a TLS key, for example)."""
    return _can_reach(host, path, who, MAY_READ)


def _can_reach(host: HostReader, socket_path: str, who: Identity, want: int) -> dict:
    kind, verb = ("socket", "write") if want == MAY_WRITE else ("file", "read")
    components = [part for part in socket_path.split("/") if part]
    # The walk is its own (not HostReader.resolve): every directory on the way is checked for search permission.
    root = host.host_root.rstrip("/") or "/"
    current = root
    shown = ""
    links = 0
    while components:
        part = components.pop(0)
        dir_stat = os.stat(current)
        allowed, why = permitted(current, dir_stat, who, MAY_EXEC)
        if not allowed:
            return _verdict(False, f"no search permission on directory {shown or '/'} ({why})", shown or "/")
        candidate = os.path.join(current, part)
        try:
            st = os.lstat(candidate)
        except OSError as exc:
            return _verdict(
                False, f"{shown}/{part}: {exc.strerror}", f"{shown}/{part}", missing=exc.errno == errno.ENOENT
            )
        if stat.S_ISLNK(st.st_mode):
            links += 1
            if links > 40:
                return _verdict(False, "too many symbolic links", f"{shown}/{part}")
            target = os.readlink(candidate)
            if target.startswith("/"):
                current, shown = root, ""
            components = [p for p in target.split("/") if p] + components
            continue
        if part == "..":
            current = os.path.dirname(current) if current != root else current
            shown = os.path.dirname(shown)
            continue
        current, shown = candidate, f"{shown}/{part}"
        if components and not stat.S_ISDIR(st.st_mode):
            return _verdict(False, f"{shown} is not a directory", shown)
    st = os.stat(current)
    if not (stat.S_ISSOCK(st.st_mode) if want == MAY_WRITE else stat.S_ISREG(st.st_mode)):
        return _verdict(False, f"{shown} is not a {'socket' if want == MAY_WRITE else 'regular file'}", shown)
    allowed, why = permitted(current, st, who, want)
    if not allowed:
        return _verdict(False, f"no {verb} permission on the {kind} {shown} ({why})", shown)
    return _verdict(True, f"search on every directory and {verb} on the {kind} ({why})", shown)


def _verdict(allowed: bool, reason: str, where: str, missing: bool = False) -> dict:
    return {"allowed": allowed, "reason": reason, "where": where, "missing": missing}


def probe_as(path: str, who: Identity, timeout: float = 3.0) -> dict:
    """Connect to ``path`` as ``who`` in a forked child (needs root); ``{"connected", "errno", "error"}``."""
    if len(os.fsencode(path)) > SUN_PATH_MAX:
        return {"connected": False, "errno": "ENAMETOOLONG", "error": f"longer than {SUN_PATH_MAX} bytes (sun_path)"}
    if os.geteuid() != 0 and who.uid != os.geteuid():
        return {"connected": None, "errno": None, "error": "not root: cannot take another user's identity"}
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never returns
        os.close(read_end)
        code = 0
        try:
            if os.geteuid() == 0:
                os.setgroups(who.groups)
                os.setgid(who.gid)
                os.setuid(who.uid)
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
                client.settimeout(timeout)
                client.connect(path)
        except OSError as exc:
            code = exc.errno or 255
        os.write(write_end, struct.pack("<i", code))
        os._exit(0)
    os.close(write_end)
    data = b""
    try:
        ready, _writable, _errors = select.select([read_end], [], [], timeout + 2)
        data = os.read(read_end, 4) if ready else b""
    finally:
        os.close(read_end)
        if not data:
            os.kill(pid, 9)
        os.waitpid(pid, 0)
    if len(data) != 4:
        return {"connected": False, "errno": "ETIMEDOUT", "error": "no answer from the probe"}
    code = struct.unpack("<i", data)[0]
    if code == 0:
        return {"connected": True, "errno": None, "error": None}
    name = errno.errorcode.get(code, str(code))
    return {"connected": False, "errno": name, "error": os.strerror(code)}


def probe_vsock(cid: int, port: int, timeout: float = 3.0) -> dict:
    """Connect to a vsock listener as Kata's QEMU does (host CID 2); ``connected`` None when vsock is absent."""
    family = getattr(socket, "AF_VSOCK", None)
    if family is None:
        return {"connected": None, "errno": None, "error": "this Python has no AF_VSOCK"}
    try:
        client = socket.socket(family, socket.SOCK_STREAM)
    except OSError as exc:
        return {
            "connected": None,
            "errno": errno.errorcode.get(exc.errno, ""),
            "error": f"no vsock here: {exc.strerror}",
        }
    with client:
        client.settimeout(timeout)
        try:
            client.connect((cid, port))
        except OSError as exc:
            code = exc.errno or 0
            return {
                "connected": False,
                "errno": errno.errorcode.get(code, str(code)),
                "error": exc.strerror or str(exc),
            }
    return {"connected": True, "errno": None, "error": None}
