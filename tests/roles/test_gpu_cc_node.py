"""gpu_cc_node on a host-shaped tree through the real ansible-playbook: drop-ins written, refusals before any
write (misspelled gate, loaded NVIDIA driver, old containerd, a config that does not import the drop-in),
idempotence and check mode. Version refusals (containerd, kubelet) are the same filters, covered in
tests/unit/plugins/module_utils/cluster/test_gpu_cc.py."""

from __future__ import annotations

import hashlib
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

KUBELET = "etc/kubernetes/kubelet.conf.d/90-confidential-tee-gpu-cc.conf"
CONTAINERD = "etc/containerd/conf.d/90-confidential-tee-gpu-cc.toml"
CONTAINERD_2_2 = "containerd github.com/containerd/containerd/v2 v2.2.1 sha"
MAIN = 'version = 3\nimports = ["/etc/containerd/conf.d/*.toml"]\n\n[plugins]\n'
PLAY = """
- name: Prepare the GPU node
  hosts: gpu
  gather_facts: false
  roles:
    - role: confidential.tee.gpu_cc_node
"""


def snapshot(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def node(tmp_path, ansible_playbook_cli):
    root = tmp_path / "root"
    (root / "etc/containerd").mkdir(parents=True)
    (root / "etc/containerd/config.toml").write_text(MAIN)
    (root / "sys/module/vfio_pci").mkdir(parents=True)
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAY)

    def run(*args: str, **host_vars):
        inventory = {
            "gpu": {
                "hosts": {
                    "gpu-1": {
                        "ansible_connection": "local",
                        "ansible_python_interpreter": sys.executable,
                        "tee_output": "apply",
                        "tee_host_root": str(root),
                        "gpu_cc_node_cluster": False,
                        "gpu_cc_node_containerd_version_output": CONTAINERD_2_2,
                        **host_vars,
                    }
                }
            }
        }
        (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
        return ansible_playbook_cli(playbook, "-i", str(tmp_path / "inventory.yml"), *args)

    run.root = root  # type: ignore[attr-defined]
    return run


def recap(proc) -> str:
    return proc.flat.split("PLAY RECAP", 1)[1]


@pytest.mark.slow
def test_writes_the_dropins_then_changes_nothing(node):
    proc = node(tee_kubernetes_version="v1.34.1")
    assert proc.returncode == 0, proc.stdout[-4000:]
    kubelet = yaml.safe_load((node.root / KUBELET).read_text())
    assert kubelet == {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "featureGates": {"RuntimeClassInImageCriApi": True},  # KubeletPodResourcesGet is on by default from 1.34
        "runtimeRequestTimeout": "20m",
    }
    containerd = tomllib.loads((node.root / CONTAINERD).read_text())
    assert containerd == {
        "version": 3,
        "plugins": {"io.containerd.cri.v1.images": {"image_pull_progress_timeout": "20m"}},
    }
    assert (node.root / "etc/containerd/config.toml").read_text() == MAIN  # the user's config is never rewritten
    assert "were not restarted" in proc.flat  # another host root: the role says so instead of restarting
    again = node(tee_kubernetes_version="v1.34.1")
    assert again.returncode == 0 and "changed=0" in recap(again)


@pytest.mark.slow
def test_check_mode_writes_nothing(node):
    before = snapshot(node.root)
    proc = node("--check", "--diff")
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert snapshot(node.root) == before
    assert "+runtimeRequestTimeout: 20m" in proc.stdout


@pytest.mark.slow
@pytest.mark.parametrize(
    "setup, host_vars, message",
    [
        (
            None,
            {"gpu_cc_node_kubelet_feature_gates": {"RuntimeClassInImageCRIApi": True}},
            "Did you mean RuntimeClassInImageCriApi",
        ),
        ("driver", {}, "The nvidia kernel module is loaded on gpu-1"),
        (
            None,
            {"gpu_cc_node_containerd_version_output": "containerd containerd.io 1.7.27 sha"},
            "containerd 1.7.27 is older than 2.2",
        ),
        ("no-import", {}, "does not import /etc/containerd/conf.d/90-confidential-tee-gpu-cc.toml"),
        (
            None,
            {"tee_kubernetes_version": "v1.28.3"},
            "kubelet 1.28 does not know feature gate RuntimeClassInImageCriApi",
        ),
    ],
)
def test_refusals_happen_before_anything_is_written(node, setup, host_vars, message):
    if setup == "driver":
        (node.root / "sys/module/nvidia").mkdir(parents=True)
    if setup == "no-import":
        (node.root / "etc/containerd/config.toml").write_text("version = 3\n")
    before = snapshot(node.root)
    proc = node(**host_vars)
    assert proc.returncode != 0
    assert message in proc.flat
    assert snapshot(node.root) == before
