"""results: the one result vocabulary (changes from the change recorder, the check record, the problems key)."""

from __future__ import annotations

import pytest
from ansible_collections.confidential.tee.plugins.module_utils.common.changes import REDACTED, Changes
from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import HostReader, local_host
from ansible_collections.confidential.tee.plugins.module_utils.common.results import (
    change_summary,
    check_record,
    file_changes_result,
    recorded_changes,
)


@pytest.fixture
def root(tmp_path):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/passwd").write_text("root:x:0:0::/root:/bin/sh\n")
    (tmp_path / "etc/group").write_text("root:x:0:\n")
    (tmp_path / "etc/same.conf").write_text("same\n")
    (tmp_path / "etc/old.conf").write_text("old\n")
    (tmp_path / "etc/gone.conf").write_text("gone\n")
    return tmp_path


def plan(changes: Changes) -> None:
    changes.file("/etc/new.conf", "new\n")
    changes.file("/etc/same.conf", "same\n")
    changes.file("/etc/old.conf", "changed\n")
    changes.file("/etc/gone.conf", None)
    changes.file("/etc/absent.conf", None)  # nothing to remove: not a change
    changes.command(["/bin/true"], "regenerate the configuration")


def test_what_a_check_run_would_change_is_what_a_real_run_changes(root):
    checked, done = (
        Changes(HostReader(str(root)), check_mode=True),
        Changes(HostReader(str(root)), check_mode=False, runner=lambda argv: (0, "", "")),
    )
    plan(checked)
    plan(done)
    would = recorded_changes(checked)
    done.apply()
    did = recorded_changes(done)
    assert would["written"] == did["written"] == [f"{root}/etc/new.conf", f"{root}/etc/old.conf"]
    assert would["removed"] == did["removed"] == [f"{root}/etc/gone.conf"]
    assert would["commands"] == did["commands"] == ["regenerate the configuration"]
    assert would["hidden"] == did["hidden"] == 0
    assert would["entries"] == did["entries"]
    assert [(e["name"].rsplit("/", 1)[1], e["changed"]) for e in did["entries"]] == [
        ("new.conf", True),
        ("same.conf", False),
        ("old.conf", True),
        ("gone.conf", True),
        ("absent.conf", False),
    ]
    # Backups exist only after a real run, of the files that were there (the changed and the removed one).
    assert would["backups"] == [] and sorted(p.rsplit("/", 1)[1].split(".conf")[0] for p in did["backups"]) == [
        "gone",
        "old",
    ]
    assert (root / "etc/old.conf").read_text() == "changed\n" and not (root / "etc/gone.conf").exists()


def test_the_deprecated_keys_carry_the_same_facts(root):
    changes = Changes(HostReader(str(root)), check_mode=True)
    plan(changes)
    result = file_changes_result(changes)
    assert result["files"] == changes.records() and result["backups"] == changes.backups
    assert [e["name"] for e in result["changes"]["entries"]] == [root.as_posix() + r["path"] for r in result["files"]]
    assert [e["reasons"] for e in result["changes"]["entries"]] == [r["reasons"] for r in result["files"]]


def test_secret_names_are_counted_not_shown_and_secret_values_never_shown(root):
    changes = Changes(HostReader(str(root)), check_mode=True, secrets=["s3cret-token"])
    changes.file("/etc/30-secret-pccs.yaml", "token: s3cret-token\n", secret=True)
    changes.file("/etc/gone.conf", None, secret=True)  # a removal is named: the collection wrote the file
    changes.file("/etc/s3cret-token.conf", "x\n")
    changes.command(["/bin/echo", "s3cret-token"], "tell s3cret-token")
    hidden = recorded_changes(changes, hide_secret_names=True)
    assert hidden["hidden"] == 1
    assert hidden["removed"] == [f"{root}/etc/gone.conf"]
    assert not any("30-secret-pccs" in entry["name"] for entry in hidden["entries"])
    assert hidden["written"] == [f"{root}/etc/{REDACTED}.conf"] and hidden["commands"] == [f"tell {REDACTED}"]
    shown = recorded_changes(changes, name=lambda path: "gitops" + path)
    assert shown["hidden"] == 0 and shown["written"][0] == "gitops/etc/30-secret-pccs.yaml"


def test_objects_and_files_share_one_shape():
    summary = change_summary(
        [
            {"name": "RuntimeClass/kata-qemu-tdx", "changed": True, "reasons": ["create"]},
            {"name": "ConfigMap/kube-system/x", "changed": True, "reasons": ["delete"]},
            {"name": "Node/tdx-1", "changed": False, "reasons": ["unchanged"]},
        ],
        removed=["ConfigMap/kube-system/x"],
    )
    assert summary == {
        "written": ["RuntimeClass/kata-qemu-tdx"],
        "removed": ["ConfigMap/kube-system/x"],
        "hidden": 0,
        "commands": [],
        "backups": [],
        "entries": summary["entries"],
    }
    assert set(summary) == set(recorded_changes(Changes(local_host(), check_mode=True)))


def test_a_check_record_is_five_fields_and_the_modules_own():
    assert check_record("qgs_config", "FAIL", "no socket", "start qgsd", details={"path": "/x"}) == {
        "name": "qgs_config",
        "status": "FAIL",
        "ok": False,
        "message": "no socket",
        "fix": "start qgsd",
        "details": {"path": "/x"},
    }
    assert check_record("vsock", "SKIP", "not asked")["ok"] is True
    with pytest.raises(ValueError, match="'BROKEN' is not one of PASS, FAIL, SKIP"):
        check_record("x", "BROKEN", "m")
    with pytest.raises(ValueError, match="ok belong to the check record itself"):
        check_record("x", "PASS", "m", ok=False)
