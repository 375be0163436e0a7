"""playbooks/cluster.yml all or nothing, through the real ansible-playbook: a failure in a later role (or on a GPU
node) leaves the manifest directory byte-identical and no stage behind; a user's own file at a name the collection
writes is refused by name; a relative tee_manifest_dir is read against the directory ansible-playbook ran in; wrong
per-node variables are refused naming the variable and the node."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.confidential.tee.plugins.module_utils.common import pool_policy

# The inventory check lists the key-pool policy's modes (plugins/module_utils/common/pool_policy.py).
MODES = ", ".join(pool_policy.mode_names())

SNP_KATA = {"snp-1": {"vendor": "amd", "tee_node_consumers": ["kata"]}}
# The same node now also runs KubeVirt on a separate TDX node: every role would change the directory.
CHANGED = {
    "snp-1": {"vendor": "amd", "tee_node_consumers": ["kata"]},
    "tdx-1": {"vendor": "intel", "tee_node_consumers": ["kata", "kubevirt"]},
}


def snapshot(directory: Path) -> tuple:
    """Every file under ``directory`` with its bytes and mode, and the stages beside it (there should be none)."""
    files = {
        str(path.relative_to(directory)): (path.read_bytes(), path.stat().st_mode)
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }
    return files, sorted(p.name for p in directory.parent.iterdir() if ".tee-staging-" in p.name)


def ok(proc) -> None:
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-3000:]


@pytest.fixture
def rendered(render, tmp_path):
    """A directory the collection rendered once, with a file of the user's beside the manifests."""
    ok(render(SNP_KATA)[0])
    out = tmp_path / "manifests"
    (out / "99-mine.yaml").write_text("kind: Mine\n")
    return out


LATE_FAILURES = [
    # KubeVirt's role fails rendering after the NFD and Kata roles would have rewritten their files.
    (CHANGED, {"kubevirt_cc_gpu_devices": [{"resource_name": "nvidia.com/x"}]}, "pci_vendor_selector"),
    # The last cluster role fails its input check.
    (
        {"tdx-1": {"vendor": "intel", "qgs": True, "tee_node_consumers": ["kata", "kubevirt"]}},
        {"tee_cluster_flavor": "openshift", "openshift_sandboxed_feature_gates": ["confidential"]},
        "argument 'openshift_sandboxed_feature_gates' is of type list",
    ),
    # A GPU node's kubelet drop-in fails, after every cluster role succeeded.
    (
        {
            **CHANGED,
            "gpu-1": {
                "vendor": "intel",
                "tee_node_consumers": ["kata"],
                "tee_key_pool_mode": "kubevirt",
                "tee_node_gpu": True,
            },
        },
        {"gpu_cc_node_kubelet_feature_gates": {"KubeletPodResourcesGett": True}},
        "unknown kubelet feature gate 'KubeletPodResourcesGett'",
    ),
    # Kata's role refuses its overheads after the NFD role planned its rule.
    (
        CHANGED,
        {"kata_runtimeclasses_overheads": "kata-qemu-snp"},
        "argument 'kata_runtimeclasses_overheads' is of type str",
    ),
]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("hosts", "cluster_vars", "named"), LATE_FAILURES, ids=["kubevirt", "openshift", "gpu", "kata"]
)
def test_a_late_failure_leaves_the_directory_byte_identical(rendered, render, hosts, cluster_vars, named):
    before = snapshot(rendered)
    proc, _ = render(hosts, **cluster_vars)
    assert proc.returncode != 0 and named in proc.flat, proc.flat[-4000:]
    assert snapshot(rendered) == before  # no file rewritten, none removed, no stage left beside it


@pytest.mark.slow
def test_a_users_file_at_a_name_the_collection_writes_is_refused_by_name(rendered, render):
    users = rendered / "40-kubevirt-kubevirt-kubevirt.yaml"
    users.write_text("apiVersion: kubevirt.io/v1\nkind: KubeVirt\nmetadata: {name: kubevirt}\n")
    before = snapshot(rendered)
    proc, _ = render(CHANGED)  # KubeVirt now runs on tdx-1: the role writes that name
    assert proc.returncode != 0
    assert "40-kubevirt-kubevirt-kubevirt.yaml is not a file this collection wrote" in proc.flat, proc.flat[-4000:]
    assert f"in {rendered}" in proc.flat and "Nothing was written to" in proc.flat
    assert snapshot(rendered) == before


@pytest.mark.slow
def test_check_mode_shows_the_commit_and_writes_nothing(rendered, render):
    before = snapshot(rendered)
    proc, _ = render(CHANGED, "--check", "--diff")
    ok(proc)
    assert "40-kubevirt-kubevirt-kubevirt.yaml" in proc.flat and "WorkloadEncryptionTDX" in proc.flat
    assert snapshot(rendered) == before
    ok(render(CHANGED)[0])
    assert (rendered / "40-kubevirt-kubevirt-kubevirt.yaml").exists() and (rendered / "99-mine.yaml").exists()


@pytest.mark.slow
def test_a_relative_manifest_dir_is_read_against_the_directory_ansible_playbook_runs_in(render, tmp_path):
    here = tmp_path / "ops"
    here.mkdir()
    proc, _ = render(SNP_KATA, cwd=here, tee_manifest_dir="gitops/cluster")
    ok(proc)
    written = sorted(p.name for p in (here / "gitops" / "cluster").iterdir())
    assert written == ["20-nodefeaturerule-confidential-tee-keys.yaml", "30-runtimeclass-kata-qemu-snp.yaml"]
    assert not (Path(__file__).resolve().parents[2] / "playbooks" / "gitops").exists()
    assert sorted(p.name for p in (here / "gitops").iterdir()) == ["cluster"]  # no stage left beside it


@pytest.mark.parametrize(
    ("node", "named"),
    [
        ({"tee_node_gpu": "maybe"}, "tee_node_gpu must be true or false, got 'maybe' for node snp-1"),
        ({"tee_node_consumers": "kata,kubevirt"}, "tee_node_consumers must be a YAML list such as [kata, kubevirt]"),
        ({"tee_node_consumers": ["kata", "vm"]}, "tee_node_consumers may hold only kata, kubevirt, got 'vm' for node"),
        (
            {"tee_key_pool_mode": "shared"},
            f"tee_key_pool_mode must be one of {MODES}, got 'shared' for node",
        ),
        ({"tee_cpu_vendor": ["amd"]}, "tee_cpu_vendor must be a string (one of auto, intel, amd), got a list"),
        (
            {"tee_k8s_node_name": "a..b"},
            "tee_k8s_node_name 'a..b' is not a Kubernetes node name (for node snp-1 (a..b))",
        ),
        ({"tee_k8s_node_name": ["snp-1"]}, "tee_k8s_node_name ['snp-1'] is not a Kubernetes node name"),
    ],
    ids=["maybe-gpu", "string-consumers", "unknown-consumer", "unknown-mode", "list-vendor", "bad-name", "list-name"],
)
def test_per_node_variables_are_refused_naming_the_variable_and_the_node(render, tmp_path, node, named):
    proc, files = render({"snp-1": {"vendor": "amd", **node}})
    assert proc.returncode != 0 and named in proc.flat, proc.flat[-3000:]
    assert "Read the TEE nodes' host facts" not in proc.flat  # refused before anything happens
    assert files == {} and not (tmp_path / "manifests").exists()


@pytest.mark.slow
def test_a_253_character_node_name_renders(render, tmp_path):
    name = ".".join(["a" * 63] * 3 + ["b" * 61])
    assert len(name) == 253
    proc, files = render({"snp-1": {"vendor": "amd", "tee_k8s_node_name": name}})
    ok(proc)
    rules = files["20-nodefeaturerule-confidential-tee-keys.yaml"]["spec"]["rules"]
    assert any(name in str(rule) for rule in rules)
