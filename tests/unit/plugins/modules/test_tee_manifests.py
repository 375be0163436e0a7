"""tee_manifests: write what changed, prune only this owner's stale files, honest check mode."""

from __future__ import annotations

import os

from ansible_collections.confidential.tee.plugins.module_utils.common.manifests import marker
from ansible_collections.confidential.tee.plugins.modules import tee_manifests


def manifest(owner, body):
    return marker(owner) + body


def test_writes_prunes_and_is_idempotent(tmp_path, run_module):
    dest = tmp_path / "gitops"
    dest.mkdir()
    (dest / "30-runtimeclass-old.yaml").write_text(manifest("kata_runtimeclasses", "kind: RuntimeClass\n"))
    (dest / "20-nodefeaturerule-x.yaml").write_text(manifest("nfd_tee_rules", "kind: NodeFeatureRule\n"))
    (dest / "99-mine.yaml").write_text("kind: Mine\n")
    files = [
        {
            "file": "30-runtimeclass-kata-qemu-tdx.yaml",
            "content": manifest("kata_runtimeclasses", "kind: RuntimeClass\n"),
        }
    ]
    args = {"dest": str(dest), "owner": "kata_runtimeclasses", "files": files}

    planned = run_module(tee_manifests, args, check_mode=True)
    assert planned["changed"] and planned["changes"]["written"] == [f"{dest}/30-runtimeclass-kata-qemu-tdx.yaml"]
    assert planned["changes"]["removed"] == [f"{dest}/30-runtimeclass-old.yaml"]
    # The deprecated names (until release 0.3.0) say the same, by file name.
    assert planned["written"] == ["30-runtimeclass-kata-qemu-tdx.yaml"]
    assert planned["removed"] == ["30-runtimeclass-old.yaml"]
    assert sorted(os.listdir(dest)) == ["20-nodefeaturerule-x.yaml", "30-runtimeclass-old.yaml", "99-mine.yaml"]

    done = run_module(tee_manifests, args)
    assert done["changed"] and sorted(os.listdir(dest)) == [
        "20-nodefeaturerule-x.yaml",
        "30-runtimeclass-kata-qemu-tdx.yaml",
        "99-mine.yaml",
    ]
    assert (dest / "30-runtimeclass-kata-qemu-tdx.yaml").stat().st_mode & 0o777 == 0o644
    again = run_module(tee_manifests, args)
    assert again["changed"] is False and again["changes"]["written"] == [] and again["changes"]["removed"] == []


def test_creates_the_directory_and_diffs(tmp_path, run_module):
    dest = tmp_path / "new" / "dir"
    files = [{"file": "10-configmap-a.yaml", "content": manifest("o", "kind: ConfigMap\n")}]
    result = run_module(tee_manifests, {"dest": str(dest), "owner": "o", "files": files})
    assert (dest / "10-configmap-a.yaml").read_text() == files[0]["content"]
    assert result["diff"][0]["after"] == files[0]["content"] and result["diff"][0]["before"] == ""


def test_refuses_bad_input(tmp_path, run_module):
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    assert "not a directory" in run_module(tee_manifests, {"dest": str(not_a_dir), "owner": "o"})["msg"]
    bad = [{"file": "../escape.yaml", "content": manifest("o", "x")}]
    assert "plain file name" in run_module(tee_manifests, {"dest": str(tmp_path), "owner": "o", "files": bad})["msg"]
    unmarked = [{"file": "a.yaml", "content": "kind: X\n"}]
    assert "owner line" in run_module(tee_manifests, {"dest": str(tmp_path), "owner": "o", "files": unmarked})["msg"]


def test_secrets_written_private_and_never_shown(tmp_path, run_module):
    dest = tmp_path / "gitops"
    data = "data:\n  production.json: c2VjcmV0LXZhbHVl\nkind: Secret\n"
    secret = {"file": "05-secret-ns-pccs-config.yaml", "content": manifest("tdx_attestation", data)}
    plain = {"file": "00-namespace-ns.yaml", "content": manifest("tdx_attestation", "kind: Namespace\n")}
    args = {
        "dest": str(dest),
        "owner": "tdx_attestation",
        "files": [plain],
        "secret_files": [secret],
        "_ansible_diff": True,
    }
    done = run_module(tee_manifests, args)
    assert done["changes"]["written"] == [f"{dest}/00-namespace-ns.yaml"] and done["changes"]["hidden"] == 1
    assert done["written"] == ["00-namespace-ns.yaml"] and done["written_secrets"] == 1
    assert "05-secret" not in str({key: value for key, value in done.items() if key != "diff"})
    assert (dest / "05-secret-ns-pccs-config.yaml").stat().st_mode & 0o777 == 0o600
    assert "c2VjcmV0LXZhbHVl" not in str(done) and "content not shown, sha256" in str(done["diff"])
    (dest / "05-secret-ns-pccs-config.yaml").chmod(0o644)
    changed = dict(secret, content=secret["content"].replace("c2VjcmV0LXZhbHVl", "b3RoZXI="))
    again = run_module(tee_manifests, dict(args, secret_files=[changed]))
    assert (
        again["changes"]["hidden"] == again["written_secrets"] == 1
        and (dest / "05-secret-ns-pccs-config.yaml").stat().st_mode & 0o777 == 0o600
    )
    pruned = run_module(tee_manifests, dict(args, secret_files=[]))
    assert pruned["changes"]["removed"] == [f"{dest}/05-secret-ns-pccs-config.yaml"] and "b3RoZXI=" not in str(pruned)
    assert pruned["removed"] == ["05-secret-ns-pccs-config.yaml"]


def test_a_staged_write_is_named_where_it_will_land(tmp_path, run_module):
    stage, final = tmp_path / "stage", tmp_path / "gitops"
    files = [{"file": "10-configmap-a.yaml", "content": manifest("o", "kind: ConfigMap\n")}]
    args = {"dest": str(stage), "owner": "o", "files": files, "staged_for": str(final)}
    result = run_module(tee_manifests, args, check_mode=True)
    assert (stage / "10-configmap-a.yaml").exists()  # a stage is written in check mode too
    assert result["changes"]["written"] == [f"{final}/10-configmap-a.yaml"]
    assert [entry["name"] for entry in result["changes"]["entries"]] == [f"{final}/10-configmap-a.yaml"]
