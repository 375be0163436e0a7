"""gpu_cc: kubelet gates (names and versions), containerd drop-ins and imports, CC mode changes."""

from __future__ import annotations

import builtins
import re
import tomllib

import pytest
from ansible_collections.confidential.tee.plugins.module_utils.cluster import gpu_cc


def test_default_gates_follow_the_kubelet_version():
    assert gpu_cc.default_kubelet_gates("v1.33.4") == {
        "RuntimeClassInImageCriApi": True,
        "KubeletPodResourcesGet": True,
    }
    assert gpu_cc.default_kubelet_gates("v1.34.0") == {"RuntimeClassInImageCriApi": True}
    assert "KubeletPodResourcesGet" in gpu_cc.default_kubelet_gates(None)


@pytest.mark.parametrize(
    "gates, message",
    [
        ({"RuntimeClassInImageCRIApi": True}, "Did you mean RuntimeClassInImageCriApi"),
        ({"KubeletPodResourceGet": True}, "Did you mean KubeletPodResourcesGet"),
        ({"NoSuchGate": True}, "refuses to start"),
        ({"RuntimeClassInImageCriApi": "true"}, "true or false"),
        (["RuntimeClassInImageCriApi"], "must be a mapping"),
    ],
)
def test_misspelled_or_malformed_gates_are_refused(gates, message):
    with pytest.raises(gpu_cc.GpuCcError, match=message):
        gpu_cc.kubelet_gates(gates)


def test_gates_the_kubelet_version_does_not_know_are_refused():
    expected = re.escape("kubelet 1.28 does not know feature gate RuntimeClassInImageCriApi")
    with pytest.raises(gpu_cc.GpuCcError, match=expected):
        gpu_cc.kubelet_gates({"RuntimeClassInImageCriApi": True}, "v1.28.9")


def test_extra_known_gates_are_accepted():
    assert gpu_cc.kubelet_gates({"FutureGate": True}, extra_known=["FutureGate"]) == {"FutureGate": True}


def test_kubelet_dropin_and_timeout():
    config = gpu_cc.kubelet_dropin({"RuntimeClassInImageCriApi": True}, "20m")
    assert config == {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "featureGates": {"RuntimeClassInImageCriApi": True},
        "runtimeRequestTimeout": "20m",
    }
    assert gpu_cc.kubelet_dropin({}, "1h30m")["runtimeRequestTimeout"] == "1h30m"
    with pytest.raises(gpu_cc.GpuCcError, match="Go duration"):
        gpu_cc.kubelet_dropin({}, "20 minutes")


def test_containerd_dropin_states_version_3():
    text = gpu_cc.containerd_dropin(
        {"plugins": {"io.containerd.cri.v1.images": {"image_pull_progress_timeout": "20m"}}}
    )
    assert tomllib.loads(text) == {
        "version": 3,
        "plugins": {"io.containerd.cri.v1.images": {"image_pull_progress_timeout": "20m"}},
    }
    with pytest.raises(gpu_cc.GpuCcError, match="version 3"):
        gpu_cc.containerd_dropin({"version": 2})
    with pytest.raises(gpu_cc.GpuCcError, match="null"):
        gpu_cc.containerd_dropin({"plugins": None})


@pytest.mark.parametrize(
    "output, ok",
    [
        ("containerd github.com/containerd/containerd/v2 v2.2.1 dd3b2a", True),
        ("containerd containerd.io 2.3.0 abc", True),
        ("containerd containerd.io 1.7.27 05044ec", False),
        ("containerd github.com/containerd/containerd/v2 v2.1.4 sha", False),
    ],
)
def test_containerd_version(output, ok):
    if ok:
        assert gpu_cc.check_containerd_version(output, "2.2")[0] >= (2, 2, 0)
    else:
        with pytest.raises(gpu_cc.GpuCcError, match=re.escape("older than 2.2")):
            gpu_cc.check_containerd_version(output, "2.2")


def test_unreadable_version_output():
    with pytest.raises(gpu_cc.GpuCcError, match="could not read a version"):
        gpu_cc.check_containerd_version("command not found", "2.2")


CONFIG = "/etc/containerd/config.toml"
DROPIN = "/etc/containerd/conf.d/90-confidential-tee-gpu-cc.toml"


@pytest.mark.parametrize(
    "text, covered",
    [
        ('version = 3\nimports = ["/etc/containerd/conf.d/*.toml"]\n', True),
        ('version = 3\nimports = ["conf.d/*.toml"]\n', True),
        ('imports = ["/etc/containerd/conf.d/90-confidential-tee-gpu-cc.toml"]\n', True),
        ('version = 3\n[plugins]\nimports = ["/etc/containerd/conf.d/*.toml"]\n', False),  # a plugin key, not top-level
        ('imports = ["/etc/containerd/conf.d/*.conf"]\n', False),
        ("version = 3\n", False),
    ],
)
def test_imports_cover_the_dropin(text, covered):
    assert gpu_cc.imports_cover(text, CONFIG, DROPIN) is covered


def test_imports_without_tomllib(monkeypatch):
    real_import = builtins.__import__

    def no_tomllib(name, *args, **kwargs):
        if name == "tomllib":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_tomllib)
    assert gpu_cc.containerd_imports(
        'version = 3\nimports = ["/a/*.toml", \'/b.toml\']\n[plugins]\nimports = ["x"]\n'
    ) == ["/a/*.toml", "/b.toml"]


def test_invalid_containerd_config():
    with pytest.raises(gpu_cc.GpuCcError, match="not valid TOML"):
        gpu_cc.containerd_imports("imports = [")


def pod(name, node="gpu-1", phase="Running", resources=None, runtime_class=None):
    spec = {"nodeName": node, "containers": [{"name": "c", "resources": resources or {}}]}
    if runtime_class:
        spec["runtimeClassName"] = runtime_class
    return {"metadata": {"name": name, "namespace": "ml"}, "spec": spec, "status": {"phase": phase}}


def test_gpu_workloads_on_the_node():
    pods = [
        pod("train", resources={"limits": {"nvidia.com/pgpu": "1"}}),
        pod("cc", runtime_class="kata-qemu-nvidia-gpu-tdx"),
        pod("done", phase="Succeeded", resources={"limits": {"nvidia.com/gpu": "1"}}),
        pod("cpu-only", resources={"requests": {"cpu": "1"}}),
        pod("elsewhere", node="gpu-2", resources={"limits": {"nvidia.com/gpu": "1"}}),
    ]
    assert gpu_cc.gpu_workloads(pods, "gpu-1") == ["ml/cc", "ml/train"]


def test_cc_mode_change_is_refused_while_gpu_workloads_run():
    with pytest.raises(gpu_cc.GpuCcError, match=re.escape("refusing gpu-1: nvidia.com/cc.mode off -> on")) as raised:
        gpu_cc.cc_mode_plan("gpu-1", {"nvidia.com/cc.mode": "off"}, "on", ["ml/train"], drain=False)
    assert "ml/train" in str(raised.value) and "gpu_cc_node_drain" in str(raised.value)


def test_cc_mode_plans():
    assert gpu_cc.cc_mode_plan("n", {"nvidia.com/cc.mode": "on"}, "on", ["ml/x"], False)["action"] == "none"
    assert gpu_cc.cc_mode_plan("n", {}, "on", [], False)["action"] == "label"
    assert gpu_cc.cc_mode_plan("n", {"nvidia.com/cc.mode": "off"}, "ppcie", ["ml/x"], True)["action"] == "drain"
    with pytest.raises(gpu_cc.GpuCcError, match="CC mode must be"):
        gpu_cc.cc_mode_plan("n", {}, "yes", [], False)


def test_cc_mode_plans_many_nodes_from_one_list_naming_every_refusal():
    def node(name, labels):
        return {"metadata": {"name": name, "labels": labels}}

    nodes = [node("a", {"nvidia.com/cc.mode": "on"}), node("b", {}), node("c", {"nvidia.com/cc.mode": "off"})]
    pods = [
        {
            "metadata": {"namespace": "ml", "name": "train"},
            "spec": {"nodeName": "c", "containers": [{"resources": {"limits": {"nvidia.com/gpu": 1}}}]},
            "status": {"phase": "Running"},
        }
    ]
    requests = [
        {"node": n, "mode": "on", "drain": False, "labels": {"nvidia.com/cc.mode": "on"}} for n in ("a", "b", "c", "x")
    ]
    before_pods = gpu_cc.cc_mode_plans(requests, nodes)
    assert before_pods["changing"] == ["b", "c"] and before_pods["missing"] == ["x"]
    planned = gpu_cc.cc_mode_plans(requests, nodes, pods)
    assert [p["action"] for p in planned["plans"]] == ["none", "label"]
    assert planned["refused"] == [
        "refusing c: nvidia.com/cc.mode off -> on: the GPU is reset on a mode change and these GPU workloads run "
        "there: ml/train. Move them, or set gpu_cc_node_drain: true to drain the node first"
    ]
    assert [o["metadata"]["name"] for o in planned["objects"]] == ["a", "b", "c"]
    # The CC manager's report: a node is still changing until nvidia.com/cc.mode.state says the mode.
    reported = [node("a", {"nvidia.com/cc.mode": "on", "nvidia.com/cc.mode.state": "on"}), node("b", {})]
    assert gpu_cc.cc_mode_plans(requests[:2], reported, label="nvidia.com/cc.mode.state")["changing"] == ["b"]
