"""changes: the one change recorder (plan, validate, write atomically with backups, verify, restore all on failure)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from ansible_collections.confidential.tee.plugins.module_utils.common import changes as changes_mod
from ansible_collections.confidential.tee.plugins.module_utils.common.changes import (
    REDACTED,
    ChangeError,
    Changes,
    lookup_id,
    show_bytes,
)
from ansible_collections.confidential.tee.plugins.module_utils.common.errors import TeeError
from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import (
    HostReader,
    local_host,
    open_host,
)

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to change owners")


@pytest.fixture
def root(tmp_path):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/passwd").write_text("root:x:0:0::/root:/bin/sh\npccs:x:991:990::/opt:/sbin/nologin\n")
    (tmp_path / "etc/group").write_text("root:x:0:\npccs:x:990:\n")
    return tmp_path


def snapshot(root: Path) -> dict:
    """Every path under ``root`` with its bytes (files), target (links) and mode: what "as it was" means."""
    seen = {}
    for path in sorted(root.rglob("*")):
        st = os.lstat(path)
        if path.is_symlink():
            seen[str(path)] = ("link", os.readlink(path))
        elif path.is_dir():
            seen[str(path)] = ("dir", stat.S_IMODE(st.st_mode))
        else:
            seen[str(path)] = ("file", path.read_bytes(), stat.S_IMODE(st.st_mode))
    return seen


def test_names_from_the_hosts_own_files(root):
    reader = HostReader(str(root))
    assert lookup_id(reader, "passwd", "pccs") == 991 and lookup_id(reader, "group", "pccs") == 990
    assert lookup_id(reader, "passwd", "107") == 107 and lookup_id(reader, "group", None) is None
    with pytest.raises(ChangeError, match="user 'qgsd' does not exist"):
        lookup_id(reader, "passwd", "qgsd")


def test_every_error_is_one_base_type():
    assert issubclass(ChangeError, TeeError) and issubclass(TeeError, ValueError)


def test_check_mode_records_and_changes_nothing(root):
    changes = Changes(HostReader(str(root)), check_mode=True)
    record = changes.file("/etc/qgs.conf", "x\n", mode=0o644).record()
    changes.apply()
    assert record == {"path": "/etc/qgs.conf", "changed": True, "reasons": ["create"]}
    assert not (root / "etc/qgs.conf").exists() and changes.records() == [record]


def test_unknown_owner_refuses_the_whole_plan_before_any_write(root):
    before = snapshot(root)
    changes = Changes(HostReader(str(root)))
    changes.file("/etc/qgs.conf", "x\n")
    changes.file("/opt/pccs/production.json", "{}\n", owner="nobody-here")
    with pytest.raises(ChangeError, match=r"user 'nobody-here' does not exist.*nothing was changed"):
        changes.apply()
    assert snapshot(root) == before


@ROOT_ONLY
def test_secret_file_created_private_with_owner(root):
    changes = Changes(HostReader(str(root)))
    changes.file("/opt/pccs/config/production.json", "{}\n", owner="pccs", group="pccs", mode=0o600)
    changes.apply()
    st = os.stat(root / "opt/pccs/config/production.json")
    assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (0o600, 991, 990)
    again = Changes(HostReader(str(root))).file(
        "/opt/pccs/config/production.json", "{}\n", owner="pccs", group="pccs", mode=0o600
    )
    assert again.changed is False


def test_mode_only_change_keeps_content_and_makes_no_backup(root):
    target = root / "etc/mpa_registration.conf"
    target.write_text("log level = info\n")
    os.chmod(target, 0o644)
    changes = Changes(HostReader(str(root)))
    change = changes.file("/etc/mpa_registration.conf", "log level = info\n", mode=0o600)
    changes.apply()
    assert change.reasons == ["mode 0644 -> 0600"]
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o600
    assert len(changes.backups) == 1  # the state before the task, kept whatever changed


def test_content_change_backs_up_and_writes_through_symlinks(root):
    (root / "srv").mkdir()
    (root / "srv/qgs.conf").write_text("port = 4050\n")
    (root / "etc/qgs.conf").symlink_to("/srv/qgs.conf")  # absolute: resolved inside the host root
    changes = Changes(HostReader(str(root)))
    changes.file("/etc/qgs.conf", "number_threads = 4\n", mode=0o644)
    changes.apply()
    assert (root / "etc/qgs.conf").is_symlink()
    assert (root / "srv/qgs.conf").read_text() == "number_threads = 4\n"
    assert len(changes.backups) == 1 and Path(changes.backups[0]).read_text() == "port = 4050\n"
    assert [p.name for p in (root / "srv").iterdir() if p.name.startswith(".tee-")] == []


def test_with_root_slash_links_are_written_through_not_replaced(tmp_path):
    (tmp_path / "target.md").write_text("old\n")
    (tmp_path / "report.md").symlink_to(tmp_path / "target.md")
    changes = Changes(local_host())
    changes.file(str(tmp_path / "report.md"), "new\n")
    changes.apply()
    assert (tmp_path / "report.md").is_symlink() and (tmp_path / "target.md").read_text() == "new\n"


def test_remove_and_absent(root):
    (root / "etc/old.service").write_text("x")
    changes = Changes(HostReader(str(root)), backup=False)
    assert changes.file("/etc/old.service", None).reasons == ["remove"]
    changes.apply()
    assert not (root / "etc/old.service").exists()
    assert Changes(HostReader(str(root))).file("/etc/old.service", None).changed is False


def test_directory_in_the_way_refused(root):
    (root / "etc/qgs.conf").mkdir()
    changes = Changes(HostReader(str(root)))
    changes.file("/etc/qgs.conf", "x")
    with pytest.raises(ChangeError, match="not a regular file"):
        changes.apply()


def test_a_file_where_a_parent_directory_goes_refuses_the_plan_before_the_first_write(root):
    (root / "etc/qgs.conf").write_text("port = 4050\n")
    (root / "etc/systemd/system").mkdir(parents=True)
    (root / "etc/systemd/system/qgsd.service.d").write_text("not a directory\n")
    before = snapshot(root)
    changes = Changes(HostReader(str(root)))
    changes.file("/etc/qgs.conf", "number_threads = 4\n")
    changes.file("/etc/systemd/system/qgsd.service.d/50-tee.conf", "[Service]\n")
    with pytest.raises(ChangeError, match=r"qgsd.service.d \(a file, not a directory\).*nothing was changed"):
        changes.apply()
    assert snapshot(root) == before


@pytest.mark.parametrize("failing", [0, 1, 2])
def test_a_failure_in_any_write_restores_every_file_and_removes_what_the_task_made(root, monkeypatch, failing):
    (root / "etc/a.conf").write_text("a before\n")
    os.chmod(root / "etc/a.conf", 0o640)
    (root / "etc/c.conf").write_text("c before\n")
    before = snapshot(root)
    changes = Changes(HostReader(str(root)))
    changes.file("/etc/a.conf", "a after\n", mode=0o600)
    changes.file("/etc/new/deeper/b.conf", "b created\n")
    changes.file("/etc/c.conf", None)
    real_replace, calls = os.replace, []

    def replace(src, dst):
        if not dst.endswith("~"):  # backups are not planned writes
            calls.append(dst)
        if len(calls) == failing + 1 and calls[-1] == dst:
            raise OSError(28, "No space left on device")
        return real_replace(src, dst)

    def unlink_failing(path, _real=os.unlink):
        if path.endswith("c.conf"):
            raise OSError(13, "Permission denied")
        return _real(path)

    monkeypatch.setattr(changes_mod.os, "replace", replace)
    if failing == 2:
        monkeypatch.setattr(changes_mod.os, "unlink", unlink_failing)
    with pytest.raises(ChangeError, match=r"restored as it was|nothing had been changed"):
        changes.apply()
    monkeypatch.undo()
    assert snapshot(root) == before


def test_read_back_difference_fails_and_restores(root, monkeypatch):
    (root / "etc/a.conf").write_text("before\n")
    changes = Changes(HostReader(str(root)))
    changes.file("/etc/a.conf", "after\n")

    real_write, calls = changes_mod.atomic_write, []

    def corrupting_write(real, data, **kwargs):
        calls.append(real)
        if len(calls) == 2:  # the planned write (the first is the backup)
            Path(real).write_bytes(b"something else\n")
        else:
            real_write(real, data, **kwargs)

    monkeypatch.setattr(changes_mod, "atomic_write", corrupting_write)
    with pytest.raises(ChangeError, match="read back, the file does not hold what was written"):
        changes.apply()
    monkeypatch.undo()
    assert (root / "etc/a.conf").read_text() == "before\n"


def test_failed_command_restores_the_files_it_touches_and_leaves_no_backup(root):
    entry = root / "boot/loader/entries/a.conf"
    entry.parent.mkdir(parents=True)
    entry.write_text("options ro\n")
    before = snapshot(root)

    def grubby(argv):
        entry.write_text("options half written\n")
        (root / "boot/loader/entries/stray.conf").write_text("x\n")
        return 1, "", "grubby: cannot update"

    changes = Changes(HostReader(str(root)), runner=grubby)
    changes.command(["grubby", "--args=x"], "add x", touches=["/boot/loader/entries/a.conf"])
    with pytest.raises(ChangeError, match="grubby --args=x failed with exit code 1: grubby: cannot update"):
        changes.apply()
    del before[str(root / "boot/loader/entries")]
    after = snapshot(root)
    del after[str(root / "boot/loader/entries")]
    after.pop(str(root / "boot/loader/entries/stray.conf"))  # not announced in touches: not the recorder's
    assert after == before


def test_files_are_written_and_proven_before_any_command_and_any_failure_restores_them(root):
    (root / "etc/a.conf").write_text("before\n")
    before = snapshot(root)
    order = []

    def runner(argv):
        order.append(("command", (root / "etc/a.conf").read_text()))
        raise RuntimeError("the runner itself broke")  # not an OSError: must restore all the same

    changes = Changes(HostReader(str(root)), runner=runner)
    changes.command(["tool"], "regenerate")  # planned first, runs after the file
    changes.file("/etc/a.conf", "after\n")
    with pytest.raises(ChangeError, match="tool the runner itself broke; every file"):
        changes.apply(before_commands=lambda: order.append(("proof", (root / "etc/a.conf").read_text())))
    assert order == [("proof", "after\n"), ("command", "after\n")]
    assert snapshot(root) == before

    def refuse():
        raise ChangeError("not as planned")

    changes = Changes(HostReader(str(root)), runner=runner)
    changes.file("/etc/a.conf", "after\n")
    changes.command(["tool"], "regenerate")
    order.clear()
    with pytest.raises(ChangeError, match="before running any command: not as planned; every file"):
        changes.apply(before_commands=refuse)
    assert order == [] and snapshot(root) == before


def test_a_backup_of_a_file_with_a_long_name_fits_name_max(root):
    name = "x" * 250 + ".cfg"
    (root / "etc" / name).write_text("before\n")
    changes = Changes(HostReader(str(root)))
    changes.file("/etc/" + name, "after\n")
    changes.file("/etc/" + name[:-4] + ".two", "new\n")
    changes.apply()
    (backup,) = changes.backups
    assert len(os.path.basename(backup).encode()) <= 255 and backup.endswith("~")
    with open(backup) as handle:
        assert handle.read() == "before\n"


def test_diff_after_is_what_a_real_run_writes_through_a_link_and_with_non_utf8_bytes(root):
    (root / "srv").mkdir()
    (root / "srv/grub").write_bytes(b"GRUB_TIMEOUT=5\n# caf\xe9\n")
    (root / "etc/grub").symlink_to("/srv/grub")
    new = b"GRUB_TIMEOUT=5\n# caf\xe9\nGRUB_X=\xff\n"
    planned = Changes(HostReader(str(root)), check_mode=True)
    planned.file("/etc/grub", new)
    planned.apply()
    [diff] = planned.diff()
    assert diff["before"] == show_bytes(b"GRUB_TIMEOUT=5\n# caf\xe9\n") == "GRUB_TIMEOUT=5\n# caf\\xe9\n"
    real = Changes(HostReader(str(root)))
    real.file("/etc/grub", new)
    real.apply()
    assert diff["after"] == show_bytes((root / "srv/grub").read_bytes())


def test_secrets_are_redacted_in_diffs_records_and_errors(root):
    (root / "etc/mpa.conf").write_text("subscription key = OLDKEY123\n")
    changes = Changes(HostReader(str(root)), secrets=["NEWKEY456"])
    changes.file(
        "/etc/mpa.conf",
        "subscription key = NEWKEY456\n",
        secret=True,
        find_secrets=lambda text: [line.split("=", 1)[1].strip() for line in text.splitlines() if "=" in line],
    )
    text = repr(changes.diff()) + repr(changes.records()) + changes.redact("refused line: OLDKEY123")
    assert "OLDKEY123" not in text and "NEWKEY456" not in text and REDACTED in text


def test_secret_file_without_a_sure_redaction_shows_a_digest(root):
    (root / "etc/p.json").write_text('{ApiKey: "OLDKEY123"}\n')

    def strict(text):
        raise ValueError("does not parse")

    changes = Changes(HostReader(str(root)))
    changes.file("/etc/p.json", '{"ApiKey": "<redacted>"}\n', secret=True, redactor=strict)
    [diff] = changes.diff()
    assert "OLDKEY123" not in repr(diff) and diff["before"].startswith("(secret file: content not shown, sha256 ")


def test_backups_never_overwrite_an_earlier_copy(tmp_path):
    target = tmp_path / "cmdline"
    target.write_text("one\n")
    first = changes_mod.backup_file(str(target), "same-second")
    target.write_text("two\n")
    second = changes_mod.backup_file(str(target), "same-second")
    assert first != second
    assert Path(first).read_text() == "one\n" and Path(second).read_text() == "two\n"


def test_backup_of_a_private_file_is_private_from_the_first_byte(tmp_path):
    target = tmp_path / "production.json"
    target.write_text("{}\n")
    os.chmod(target, 0o600)
    saved = changes_mod.backup_file(str(target), "now")
    assert stat.S_IMODE(os.stat(saved).st_mode) == 0o600


def test_atomic_write_leaves_no_temporary_file_on_failure(tmp_path, monkeypatch):
    target = tmp_path / "cmdline"
    target.write_text("keep\n")

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(changes_mod.os, "replace", broken_replace)
    with pytest.raises(OSError):
        changes_mod.atomic_write(str(target), "new\n")
    assert target.read_text() == "keep\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cmdline"]


class FakeModule:
    def __init__(self, host_root):
        self.params = {"host_root": host_root}

    def fail_json(self, msg, **kwargs):
        self.failed_with = kwargs
        raise SystemExit(msg)


def test_open_host_is_the_one_guard(tmp_path):
    assert open_host(FakeModule(str(tmp_path))).host_root == str(tmp_path)
    module = FakeModule(str(tmp_path / "missing"))
    with pytest.raises(SystemExit, match=r"host_root .*missing is not a directory"):
        open_host(module)
    # The option, for the module's action plugin to name the role's <role>_host_root (plugin_utils.module_refusal).
    assert module.failed_with == {"refused_option": "host_root"}


def test_a_backup_name_is_one_fat_accepts(root):
    # Loader entries live on an EFI system partition (FAT), which refuses these characters in a name (EINVAL).
    (root / "etc" / "a.conf").write_text("before\n")
    changes = Changes(HostReader(str(root)))
    changes.file("/etc/a.conf", "after\n")
    changes.apply()
    (backup,) = changes.backups
    assert not set(os.path.basename(backup)) & set('"*/:<>?\\|')


def test_the_recorder_changes_the_host_it_is_given(root):
    host = HostReader(str(root))
    changes = Changes(host)
    assert changes.reader is host
    assert Changes(local_host()).reader.is_live


def test_a_root_string_is_refused_every_writer_passes_its_host(root):
    # Issue 44, step 2: no writer builds its own reader from a root string any more.
    for made in (lambda: Changes(str(root)), lambda: Changes()):
        with pytest.raises(TypeError, match="needs the host"):
            made()
