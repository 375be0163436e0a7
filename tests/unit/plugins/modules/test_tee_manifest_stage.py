"""tee_manifest_stage: stage, commit (check mode writes nothing to dest), abort; nothing but a stage is removed."""

from __future__ import annotations

import os

from ansible_collections.confidential.tee.plugins.module_utils.common.manifests import marker
from ansible_collections.confidential.tee.plugins.modules import tee_manifest_stage


def _tree(path):
    return {
        os.path.relpath(os.path.join(here, name), path): open(os.path.join(here, name), "rb").read()
        for here, _dirs, files in os.walk(path)
        for name in files
    }


def test_stage_commit_and_check_mode(tmp_path, run_module):
    dest = tmp_path / "gitops"
    dest.mkdir()
    (dest / "20-a.yaml").write_text(marker("o") + "old\n")
    (dest / "30-gone.yaml").write_text(marker("o") + "x\n")
    (dest / "99-mine.yaml").write_text("kind: Mine\n")
    before = _tree(dest)
    for check in (True, False):
        staging = run_module(tee_manifest_stage, {"dest": str(dest)}, check_mode=check)["staging"]
        (tmp_path / staging / "20-a.yaml").write_text(marker("o") + "new\n")
        os.remove(os.path.join(staging, "30-gone.yaml"))
        args = {"dest": str(dest), "staging": staging, "state": "committed", "_ansible_diff": True}
        result = run_module(tee_manifest_stage, args, check_mode=check)
        assert result["changes"]["written"] == [f"{dest}/20-a.yaml"] and result["changes"]["removed"] == [
            f"{dest}/30-gone.yaml"
        ]
        # The deprecated names (until release 0.3.0) say the same, relative to dest.
        assert result["changed"] and result["written"] == ["20-a.yaml"] and result["removed"] == ["30-gone.yaml"]
        assert not os.path.exists(staging)  # the stage is gone either way
        if check:
            assert _tree(dest) == before
    assert sorted(os.listdir(dest)) == ["20-a.yaml", "99-mine.yaml"]
    assert (dest / "20-a.yaml").read_text().endswith("new\n")


def test_abort_removes_only_a_stage(tmp_path, run_module):
    dest = tmp_path / "gitops"
    staging = run_module(tee_manifest_stage, {"dest": str(dest)})["staging"]
    assert (
        run_module(tee_manifest_stage, {"dest": str(dest), "staging": staging, "state": "absent"})["changed"] is False
    )
    assert not os.path.exists(staging)
    other = tmp_path / "keep"
    other.mkdir()
    result = run_module(tee_manifest_stage, {"dest": str(dest), "staging": str(other), "state": "absent"})
    assert result["failed"] and "is not a staging directory" in result["msg"] and other.exists()
    assert "must be an absolute path" in run_module(tee_manifest_stage, {"dest": "rel"})["msg"]
