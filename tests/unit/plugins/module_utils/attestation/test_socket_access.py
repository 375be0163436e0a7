"""socket_access: connect() permission decided as the kernel decides it, confirmed by a real connect()."""

from __future__ import annotations

import os
import shutil
import socket
import struct
import tempfile
from pathlib import Path

import pytest
from ansible_collections.confidential.tee.plugins.module_utils.attestation.socket_access import (
    MAY_EXEC,
    MAY_WRITE,
    Identity,
    acl_permits,
    can_connect,
    mode_permits,
    parse_acl,
    probe_as,
)
from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import HostReader

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to chown and to take another identity")
QEMU = Identity("kubevirt", 107, 107, [107])
OTHER = Identity("other", 108, 108, [])


class Stat:
    def __init__(self, mode, uid=0, gid=0):
        self.st_mode, self.st_uid, self.st_gid = mode, uid, gid


@pytest.mark.parametrize(
    ("mode", "uid", "gid", "who", "want", "allowed"),
    [
        (0o660, 0, 107, QEMU, MAY_WRITE, True),
        (0o640, 0, 107, QEMU, MAY_WRITE, False),
        (0o606, 107, 0, QEMU, MAY_WRITE, True),
        (0o066, 107, 107, QEMU, MAY_WRITE, False),  # the owner class decides even when group/other would allow
        (0o662, 0, 0, OTHER, MAY_WRITE, True),
        (0o750, 0, 107, QEMU, MAY_EXEC, True),
        (0o700, 0, 107, QEMU, MAY_EXEC, False),
        (0o660, 0, 50, Identity("x", 9, 9, [50]), MAY_WRITE, True),
    ],
)
def test_mode_bits(mode, uid, gid, who, want, allowed):
    assert mode_permits(Stat(mode, uid, gid), who, want) is allowed


def acl(*entries):
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *entry) for entry in entries)


USER_OBJ, USER, GROUP_OBJ, GROUP, MASK, OTHER_TAG = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20


@pytest.mark.parametrize(
    ("entries", "allowed"),
    [
        ([(USER_OBJ, 6, 0), (USER, 6, 107), (GROUP_OBJ, 0, 0), (MASK, 6, 0), (OTHER_TAG, 0, 0)], True),
        ([(USER_OBJ, 6, 0), (USER, 6, 107), (GROUP_OBJ, 0, 0), (MASK, 4, 0), (OTHER_TAG, 0, 0)], False),
        ([(USER_OBJ, 6, 0), (GROUP_OBJ, 0, 0), (GROUP, 2, 107), (MASK, 6, 0), (OTHER_TAG, 0, 0)], True),
        ([(USER_OBJ, 6, 0), (GROUP_OBJ, 0, 0), (GROUP, 4, 107), (MASK, 6, 0), (OTHER_TAG, 6, 0)], False),
        ([(USER_OBJ, 6, 0), (GROUP_OBJ, 0, 0), (OTHER_TAG, 2, 0)], True),
    ],
)
def test_posix_acls_as_posix_acl_permission(entries, allowed):
    parsed = parse_acl(acl(*entries))
    assert acl_permits(parsed, Stat(0o600, 0, 0), QEMU, MAY_WRITE) is allowed


@pytest.mark.parametrize("data", [b"", b"\x01\x00\x00\x00", acl((USER_OBJ, 6, 0))[:-1]])
def test_malformed_acls_refused(data):
    assert parse_acl(data) is None


@pytest.fixture
def tree(unix_listener):
    """host_root with /var/run -> /run and a live socket /run/tdx-qgs/qgs.socket (0660 root:107).

    It lives directly under /tmp: a real connect() as uid 107 walks every directory from /, and pytest's own
    temporary directories are 0700.
    """
    tmp_path = Path(tempfile.mkdtemp(prefix="tee-socket-", dir="/tmp"))
    (tmp_path / "var").mkdir()
    (tmp_path / "var/run").symlink_to("/run")
    socket_path = tmp_path / "run/tdx-qgs/qgs.socket"
    unix_listener(socket_path)
    os.chmod(tmp_path, 0o755)
    os.chmod(socket_path.parent, 0o755)
    os.chmod(socket_path, 0o660)
    if os.geteuid() == 0:
        os.chown(socket_path, 0, 107)
    yield tmp_path, socket_path
    shutil.rmtree(tmp_path)


@ROOT_ONLY
def test_model_and_real_connect_agree(tree):
    root, socket_path = tree
    for who, allowed in ((QEMU, True), (OTHER, False), (Identity("root", 0, 0, []), True)):
        model = can_connect(HostReader(str(root)), "/var/run/tdx-qgs/qgs.socket", who)
        real = probe_as(str(socket_path), who)
        assert model["allowed"] is allowed is real["connected"], (who, model, real)
    assert probe_as(str(socket_path), OTHER)["errno"] == "EACCES"


@ROOT_ONLY
def test_directory_without_search_permission_named(tree):
    root, socket_path = tree
    os.chmod(socket_path.parent, 0o700)  # what DCAP 1.24/1.25 create
    model = can_connect(HostReader(str(root)), "/var/run/tdx-qgs/qgs.socket", QEMU)
    assert not model["allowed"] and "no search permission on directory /run/tdx-qgs" in model["reason"]
    assert probe_as(str(socket_path), QEMU)["errno"] == "EACCES"


@ROOT_ONLY
def test_acl_grants_what_mode_bits_do_not(tree):
    root, socket_path = tree
    os.chown(socket_path, 0, 0)
    try:
        os.setxattr(socket_path, "system.posix_acl_access", acl(
            (USER_OBJ, 6, 0), (USER, 6, 107), (GROUP_OBJ, 0, 0), (MASK, 6, 0), (OTHER_TAG, 0, 0)
        ))  # fmt: skip
    except OSError as exc:
        pytest.skip(f"no POSIX ACLs on this filesystem: {exc.strerror}")
    model = can_connect(HostReader(str(root)), "/var/run/tdx-qgs/qgs.socket", QEMU)
    assert model["allowed"] and "POSIX ACL" in model["reason"]
    assert probe_as(str(socket_path), QEMU)["connected"] is True


def test_missing_and_not_a_socket(tmp_path):
    (tmp_path / "run/tdx-qgs").mkdir(parents=True)
    os.chmod(tmp_path, 0o755)
    assert can_connect(HostReader(str(tmp_path)), "/run/tdx-qgs/qgs.socket", QEMU)["missing"] is True
    (tmp_path / "run/tdx-qgs/qgs.socket").write_text("")
    assert "is not a socket" in can_connect(HostReader(str(tmp_path)), "/run/tdx-qgs/qgs.socket", QEMU)["reason"]


def test_stale_socket_refused(tmp_path):
    # What a crashed QGS leaves: the socket file, nobody listening.
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(tmp_path / "qgs.socket"))
    stale.close()
    result = probe_as(str(tmp_path / "qgs.socket"), Identity("me", os.geteuid(), os.getegid(), []))
    assert result["connected"] is False and result["errno"] == "ECONNREFUSED"


def test_overlong_path(tmp_path):
    assert probe_as("/" + "x" * 200, QEMU)["errno"] == "ENAMETOOLONG"
