"""file_writer: the one place configuration files change (check mode, backups, owners, symlinks, atomicity)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from ansible_collections.confidential.tee.plugins.module_utils.common import file_writer
from ansible_collections.confidential.tee.plugins.module_utils.common.file_writer import (
    FileWriter,
    WriteError,
    lookup_id,
)
from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import HostReader

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to change owners")


@pytest.fixture
def root(tmp_path):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/passwd").write_text("root:x:0:0::/root:/bin/sh\npccs:x:991:990::/opt:/sbin/nologin\n")
    (tmp_path / "etc/group").write_text("root:x:0:\npccs:x:990:\n")
    return tmp_path


def test_names_from_the_hosts_own_files(root):
    reader = HostReader(str(root))
    assert lookup_id(reader, "passwd", "pccs") == 991 and lookup_id(reader, "group", "pccs") == 990
    assert lookup_id(reader, "passwd", "107") == 107 and lookup_id(reader, "group", None) is None
    with pytest.raises(WriteError, match="user 'qgsd' does not exist"):
        lookup_id(reader, "passwd", "qgsd")


def test_check_mode_records_and_changes_nothing(root):
    writer = FileWriter(str(root), check_mode=True)
    record = writer.apply("/etc/qgs.conf", "x\n", mode=0o644)
    assert record == {"path": "/etc/qgs.conf", "changed": True, "reasons": ["create"]}
    assert not (root / "etc/qgs.conf").exists() and writer.done == [record]


@ROOT_ONLY
def test_secret_file_created_private_with_owner(root):
    writer = FileWriter(str(root), check_mode=False)
    writer.apply("/opt/pccs/config/production.json", "{}\n", "pccs", "pccs", 0o600)
    st = os.stat(root / "opt/pccs/config/production.json")
    assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (0o600, 991, 990)
    again = writer.apply("/opt/pccs/config/production.json", "{}\n", "pccs", "pccs", 0o600)
    assert again["changed"] is False


def test_mode_only_change_keeps_content_and_makes_no_backup(root):
    target = root / "etc/mpa_registration.conf"
    target.write_text("log level = info\n")
    os.chmod(target, 0o644)
    writer = FileWriter(str(root), check_mode=False)
    record = writer.apply("/etc/mpa_registration.conf", "log level = info\n", mode=0o600)
    assert record["reasons"] == ["mode 0644 -> 0600"] and writer.backups == []
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o600


def test_content_change_backs_up_and_writes_through_symlinks(root):
    (root / "srv").mkdir()
    (root / "srv/qgs.conf").write_text("port = 4050\n")
    (root / "etc/qgs.conf").symlink_to("/srv/qgs.conf")  # absolute: resolved inside the host root
    writer = FileWriter(str(root), check_mode=False)
    writer.apply("/etc/qgs.conf", "number_threads = 4\n", mode=0o644)
    assert (root / "etc/qgs.conf").is_symlink()
    assert (root / "srv/qgs.conf").read_text() == "number_threads = 4\n"
    assert len(writer.backups) == 1 and Path(writer.backups[0]).read_text() == "port = 4050\n"
    assert [p.name for p in (root / "srv").iterdir() if p.name.startswith(".tee-")] == []


def test_remove_and_absent(root):
    (root / "etc/old.service").write_text("x")
    writer = FileWriter(str(root), check_mode=False, backup=False)
    assert writer.apply("/etc/old.service", None)["reasons"] == ["remove"]
    assert not (root / "etc/old.service").exists()
    assert writer.apply("/etc/old.service", None)["changed"] is False


def test_directory_in_the_way_refused(root):
    (root / "etc/qgs.conf").mkdir()
    with pytest.raises(WriteError, match="not a regular file"):
        FileWriter(str(root), check_mode=False).apply("/etc/qgs.conf", "x")


def test_backups_never_overwrite_an_earlier_copy(tmp_path):
    target = tmp_path / "cmdline"
    target.write_text("one\n")
    first = file_writer.backup_file(str(target), "same-second")
    target.write_text("two\n")
    second = file_writer.backup_file(str(target), "same-second")
    assert first != second
    assert Path(first).read_text() == "one\n" and Path(second).read_text() == "two\n"


def test_atomic_write_leaves_no_temporary_file_on_failure(tmp_path, monkeypatch):
    target = tmp_path / "cmdline"
    target.write_text("keep\n")

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(file_writer.os, "replace", broken_replace)
    with pytest.raises(OSError):
        file_writer.atomic_write(str(target), "new\n")
    assert target.read_text() == "keep\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cmdline"]
