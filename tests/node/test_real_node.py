"""A real kubelet and containerd run teesim's guests: Kata-shaped and virt-launcher-shaped pods charge TEE keys.

The node (scripts/kube_node.py) has 2 TDX keys in teesim's kernel. NFD's extended resource ``tdx.intel.com/keys``
(2, patched into the Node's capacity as nfd-master does) is the Kata RuntimeClass's overhead; KubeVirt v1.9.0's
real TDX plugin advertises ``devices.kubevirt.io/tdx`` from the same ``misc.capacity``. The real kube-scheduler
binds every pod; each guest's entrypoint launches through teesim's kernel, charged to its own container's cgroup.
Two pools over one set of keys: a Kata pod and two VMIs all fit the scheduler's and the kubelet's accounting
(one of each pool's two), yet only two keys exist, so the last guest's launch fails with the kernel's ENOSPC, as
teesim's double-pool model predicts.
"""

from __future__ import annotations

from ansible_collections.confidential.tee.plugins.module_utils.cluster.runtimeclasses import kata_classes
from kube_node import KATA_HANDLERS, TDX_NODE_LABELS, RealNode, guest_pod, kubevirt_tdx_plugin
from kubelet_comparison import NFD_KEYS
from kubelet_comparison import RESOURCE as KUBEVIRT_TDX
from teesim.cluster.pods import Consumer
from teesim.cluster.workload import Arrival
from teesim.kernel.node import NodeSpec
from teesim.kernel.profiles import CURRENT
from teesim.sim.simulation import Settings, Simulation, World
from teesim.strategies import get_strategy

from .conftest import apply, delete_every_pod, get, leftovers_of, wait_until

NAMESPACE = "tee-guests"


def phase(plane, name: str) -> dict:
    return get(plane, "pod", name, "-n", NAMESPACE)


def model_second_kata_phases() -> dict[bool, str]:
    """teesim's model (strategy ``double-pool``: Kata on NFD's 2 keys) of a second Kata pod created after the
    first one's status was posted, with the overhead counted once (the default) and twice (Kubernetes 1.37)."""
    phases = {}
    for twice in (False, True):
        arrivals = tuple(Arrival(t, seq, Consumer.KATA, "tdx", 1e5, 2.0) for seq, t in enumerate((0.0, 30.0)))
        node = NodeSpec("n", CURRENT, "intel", {"tdx": 2})
        world = World(nodes=(node,), arrivals=arrivals, duration=60.0, settings=Settings(overhead_counted_twice=twice))
        sim = Simulation(world, get_strategy("double-pool"))
        sim.run()
        phases[twice] = sim.pods[1].phase.value
    return phases


def test_kata_and_kubevirt_guests_charge_teesims_kernel_on_a_real_node(plane, node_factory) -> None:
    node = node_factory(name="tee-real-1", runtime_handlers=KATA_HANDLERS, capacity={"tdx": 2}, labels=TDX_NODE_LABELS)
    # The kubelet registered the Node itself: its version, containerd's, and Ready from the runtime's conditions.
    info = get(plane, "node", node.name)["status"]["nodeInfo"]
    assert info["kubeletVersion"] == node.build["kubernetes"]
    assert info["containerRuntimeVersion"] == "containerd://" + node.build["containerd"].removeprefix("v")

    # NFD's extended resource for Kata, as nfd-master patches it; the kubelet copies capacity to allocatable.
    plane.kubectl(
        "patch",
        "node",
        node.name,
        "--subresource=status",
        "--type=merge",
        "-p",
        f'{{"status":{{"capacity":{{"{NFD_KEYS}":"2"}}}}}}',
    )
    node.wait_allocatable(NFD_KEYS, 2)
    # KubeVirt's real TDX plugin, sized from teesim's misc.capacity, registered with the real kubelet.
    node.start_plugin("kubevirt", kubevirt_tdx_plugin(node), run_dirs=("tdx-qgs",))
    node.wait_allocatable(KUBEVIRT_TDX, 2)

    kata_class = kata_classes({"kata": {"tdx": {"resource": NFD_KEYS}}})[0]
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": NAMESPACE}}
    apply(plane, namespace, account, kata_class)
    kata = guest_pod("kata-1", node, runtime_class=kata_class["metadata"]["name"], namespace=NAMESPACE)
    vmi = guest_pod("virt-launcher-1", node, requests={KUBEVIRT_TDX: 1}, namespace=NAMESPACE)
    apply(plane, kata, vmi)

    for name in ("kata-1", "virt-launcher-1"):
        running = wait_until(
            lambda n=name: phase(plane, n)["status"].get("phase") == "Running" and phase(plane, n),
            name,
            describe=lambda n=name: (phase(plane, n)["status"], get(plane, "events", "-n", NAMESPACE)["items"][-6:]),
        )
        assert running["spec"]["nodeName"] == node.name  # bound by the real kube-scheduler
    # RuntimeClass admission copied the overhead, key included, into the Kata pod.
    assert phase(plane, "kata-1")["spec"]["overhead"][NFD_KEYS] == "1"
    misc = node.root / "sys/fs/cgroup"
    wait_until(lambda: (misc / "misc.current").read_text() == "tdx 2\n", "two keys charged")
    charged = sorted(p.parent.relative_to(misc) for p in misc.rglob("misc.current") if p.read_text() == "tdx 1\n")
    uids = {phase(plane, n)["metadata"]["uid"] for n in ("kata-1", "virt-launcher-1")}
    # Each guest charged its own container's cgroup under the pod's, as KVM charges the task creating the guest.
    assert {str(p).split("/")[2].removeprefix("pod") for p in charged if len(p.parts) == 4} == uids

    # A second VMI: KubeVirt still advertises a free device (it counts devices, not keys), the scheduler and the
    # kubelet admit it, and the launch fails in the kernel: the Kata pod holds the other key.
    apply(plane, guest_pod("virt-launcher-2", node, requests={KUBEVIRT_TDX: 1}, namespace=NAMESPACE))
    failed = wait_until(
        lambda: phase(plane, "virt-launcher-2")["status"].get("phase") == "Failed" and phase(plane, "virt-launcher-2"),
        "the second VMI's launch fails",
    )
    assert failed["spec"]["nodeName"] == node.name
    message = failed["status"]["containerStatuses"][0]["state"]["terminated"]["message"]
    assert "ENOSPC" in message and "no free TDX KeyID" in message, message

    # kubernetes/kubernetes#139627 (open; v1.36+, InPlacePodLevelResourcesVerticalScaling beta): the kubelet posts
    # the Kata pod's status.allocatedResources with its overhead in it (kubelet_pods.go generateAPIPodStatus) and
    # PodRequests adds the overhead to that again, so the scheduler counts kata-1 as 2 of NFD's 2 keys: a second
    # Kata pod, 1 + 1 of 2 by the rule teesim models by default, is refused, as the model says with
    # Settings(overhead_counted_twice=True).
    assert model_second_kata_phases() == {False: "Running", True: "Pending"}
    assert phase(plane, "kata-1")["status"]["allocatedResources"][NFD_KEYS] == "1"
    apply(plane, guest_pod("kata-3", node, runtime_class=kata_class["metadata"]["name"], namespace=NAMESPACE))
    wait_until(
        lambda: any(
            f"Insufficient {NFD_KEYS}" in e["message"]
            for e in get(plane, "events", "-n", NAMESPACE, "--field-selector", "involvedObject.name=kata-3")["items"]
        ),
        "the second Kata pod refused by the scheduler",
    )
    assert phase(plane, "kata-3")["status"].get("phase") == "Pending"

    delete_every_pod(plane, NAMESPACE)
    wait_until(lambda: (misc / "misc.current").read_text() == "tdx 0\n", "every key released")


def test_a_failed_start_leaves_nothing_behind(plane) -> None:
    """The kubelet refuses an invalid node label and exits: start() fails and removes what it had made."""
    node = RealNode(plane, name="tee-real-bad", labels={"not a label!": "x"})
    try:
        node.start(timeout=60)
    except RuntimeError as failed:
        assert "kubelet exited" in str(failed)
    else:
        node.stop()
        raise AssertionError("the kubelet accepted an invalid node label")
    assert leftovers_of(node) == []
