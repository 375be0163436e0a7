"""A kubelet restart with a running Kata pod whose key is RuntimeClass overhead on a device-plugin name.

docs/simulator.md claims "a kubelet restart rejects overhead-only Kata pods wherever Kata's key is overhead on a
device-plugin name" (teesim.sim.node_kubelet.readmit). This file runs that on the real node. It is NOT GREEN yet and
listed in ``collect_ignore`` (tests/node/conftest.py); what the real kubelet v1.37.2 did in three runs here
(2026-12-02), none of it what the model says:

* before any restart, the VMI (``devices.kubevirt.io/tdx: 1``) created together with the Kata pod (overhead
  ``devices.kubevirt.io/tdx: 1``) was once rejected at admission: "Node didn't have enough resource:
  devices.kubevirt.io/tdx, requested: 1, used: 2, capacity: 2" (``OutOfdevices.kubevirt.io/tdx``), and once never
  reached Running within 120 s; once both ran;
* after the restart, the Kata pod ended ``Succeeded`` (its guest got SIGTERM and exited 0), not ``Failed`` with
  ``OutOfdevices.kubevirt.io/tdx``; the VMI kept running;
* KubeVirt v1.9.0's plugins sent registration requests to the new kubelet, yet ``devices.kubevirt.io/tdx``
  capacity stayed 0 for 120 s.

Each needs the kubelet's and KubeVirt's source read against the logs before the model or the docs change.
"""

from __future__ import annotations

from ansible_collections.confidential.tee.plugins.module_utils.cluster.runtimeclasses import (
    KATA_RUNTIME_LABEL,
    TEE_LABELS,
    kata_classes,
)

from .conftest import apply, get, kubevirt_plugins, wait_until
from .test_real_node import HANDLERS, INTEL, KUBEVIRT_TDX, NAMESPACE, guest_pod, phase, with_kernel


def test_a_kubelet_restart_with_a_kata_pod_whose_key_is_overhead_on_a_device_plugin_name(plane, node_factory) -> None:
    """docs/simulator.md: "a kubelet restart rejects overhead-only Kata pods wherever Kata's key is overhead on a
    device-plugin name" (teesim.sim.node_kubelet.readmit). Here the real kubelet restarts with a Kata pod whose
    RuntimeClass overhead takes ``devices.kubevirt.io/tdx`` and a VMI holding one of those devices."""
    labels = {KATA_RUNTIME_LABEL: "true", TEE_LABELS["tdx"]: "true"}
    node = node_factory(name="tee-real-2", runtime_handlers=HANDLERS, capacity={"tdx": 2}, labels=labels)
    node.start_plugin(
        "kubevirt",
        [str(kubevirt_plugins()), "--node-name", node.name, "--feature-gates", INTEL["kubevirt_gate"]],
        run_dirs=("tdx-qgs",),
    )
    node.wait_allocatable(KUBEVIRT_TDX, 2)
    kata_class = kata_classes({"kata": {"tdx": {"resource": KUBEVIRT_TDX}}})[0]
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": NAMESPACE}}
    apply(plane, namespace, account, kata_class)
    image, kernel_dir = node.build["images"]["guest"], str(node.kernel_socket.parent)
    kata = with_kernel(guest_pod("kata-2", image, runtime_class=kata_class["metadata"]["name"]), kernel_dir)
    vmi = with_kernel(guest_pod("virt-launcher-3", image, devices={KUBEVIRT_TDX: "1"}), kernel_dir)
    apply(plane, kata, vmi)
    for name in ("kata-2", "virt-launcher-3"):
        wait_until(
            lambda n=name: phase(plane, n)["status"].get("phase") == "Running",
            f"{name} running",
            describe=lambda n=name: phase(plane, n)["status"],
        )
    misc = node.root / "sys/fs/cgroup"
    wait_until(lambda: (misc / "misc.current").read_text() == "tdx 2\n", "two keys charged")

    node.restart_kubelet()
    wait_until(  # KubeVirt's plugin registered with the new kubelet
        lambda: get(plane, "node", node.name)["status"]["allocatable"].get(KUBEVIRT_TDX) == "2",
        f"{KUBEVIRT_TDX} allocatable again",
        describe=lambda: (
            {k: v for k, v in get(plane, "node", node.name)["status"]["capacity"].items() if "tdx" in k},
            {n: phase(plane, n)["status"] for n in ("kata-2", "virt-launcher-3")},
            node.log_tail("plugin-kubevirt", 3000),
        ),
    )
    after = {name: phase(plane, name)["status"] for name in ("kata-2", "virt-launcher-3")}
    outcome = {name: (status.get("phase"), status.get("reason")) for name, status in after.items()}
    # The VMI's device is in the device manager's checkpoint: it is admitted again and keeps running.
    assert outcome["virt-launcher-3"] == ("Running", None), outcome
    # The Kata pod's key is overhead only: the model says the restarted kubelet rejects it.
    assert outcome["kata-2"] == ("Failed", f"OutOf{KUBEVIRT_TDX}"), outcome
    wait_until(lambda: (misc / "misc.current").read_text() == "tdx 1\n", "the rejected Kata guest's key released")
    plane.kubectl("delete", "pod", "-n", NAMESPACE, "--all", "--wait=true", "--timeout=120s")
