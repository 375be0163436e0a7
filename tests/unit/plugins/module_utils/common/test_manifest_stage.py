"""manifest_stage: a stage copies only the manifests, the commit writes only differences and removes only the
collection's pruned files, and nothing but a stage is ever removed."""

from __future__ import annotations

import shutil

import pytest
from ansible_collections.confidential.tee.plugins.module_utils.common import manifest_stage as ms
from ansible_collections.confidential.tee.plugins.module_utils.common.manifests import (
    ManifestError,
    marker,
    plan_directory,
)


def test_stage_copies_manifests_and_the_nodes_tree_with_their_modes(tmp_path):
    dest = tmp_path / "gitops"
    (dest / "nodes" / "n1" / "etc").mkdir(parents=True)
    (dest / "20-a.yaml").write_text(marker("o") + "x: 1\n")
    (dest / "05-secret.yaml").write_text(marker("o") + "kind: Secret\n")
    (dest / "05-secret.yaml").chmod(0o600)
    (dest / "nodes" / "n1" / "etc" / "k.conf").write_text("k\n")
    (dest / "README.md").write_text("mine\n")
    stage = ms.stage(str(dest))
    assert stage.startswith(str(tmp_path / ".gitops.tee-staging-"))
    assert ms.staged_names(stage) == ["05-secret.yaml", "20-a.yaml", "nodes/n1/etc/k.conf"]
    assert (tmp_path / stage / "05-secret.yaml").stat().st_mode & 0o777 == 0o600
    assert ms.is_stage(str(dest), stage) and not ms.is_stage(str(dest), str(tmp_path))
    assert ms.remove_stage(str(dest), str(tmp_path)) is False and dest.exists()
    assert ms.remove_stage(str(dest), stage) is True


def test_commit_plan_writes_differences_and_removes_only_pruned_collection_files():
    ours, user = (marker("o") + "a\n").encode(), b"kind: Mine\n"
    staged = {"20-a.yaml": ((marker("o") + "b\n").encode(), 0o644), "99-mine.yaml": (user, 0o644)}
    existing = {"20-a.yaml": ours, "30-gone.yaml": ours, "99-mine.yaml": user}
    writes, removals = ms.plan_commit(staged, existing)
    assert [w["file"] for w in writes] == ["20-a.yaml"] and removals == ["30-gone.yaml"]


def test_a_relative_dest_is_refused(tmp_path):
    with pytest.raises(ms.StageError, match="must be an absolute path"):
        ms.stage("gitops")


def test_a_users_file_at_a_collection_name_is_refused_by_name():
    wanted = [{"file": "40-kubevirt-kubevirt-kubevirt.yaml", "content": marker("kubevirt_cc") + "x\n"}]
    with pytest.raises(ManifestError, match=r"40-kubevirt-kubevirt-kubevirt\.yaml is not a file this collection wrote"):
        plan_directory({"40-kubevirt-kubevirt-kubevirt.yaml": "kind: KubeVirt\n"}, wanted, "kubevirt_cc")
    with pytest.raises(ManifestError, match="was written by nfd_tee_rules, not kubevirt_cc"):
        plan_directory({"40-kubevirt-kubevirt-kubevirt.yaml": marker("nfd_tee_rules")}, wanted, "kubevirt_cc")


def test_a_manifest_directory_with_a_255_byte_name_still_gets_a_stage(tmp_path):
    dest = tmp_path / ("m" * 255)
    dest.mkdir()
    (dest / "10-configmap-a.yaml").write_text("# confidential.tee owner: me\n")
    staging = ms.stage(str(dest))
    try:
        assert ms.is_stage(str(dest), staging)
        assert not ms.is_stage(str(tmp_path / ("m" * 254)), staging)
        assert (tmp_path / staging).joinpath("10-configmap-a.yaml").read_text().startswith("# confidential.tee")
    finally:
        shutil.rmtree(staging)
