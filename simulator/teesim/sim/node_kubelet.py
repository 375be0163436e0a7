"""One node's kubelet in ``teesim run``: the pod life cycle from binding to the pod's end.

:class:`NodeKubelet` is what a kubelet does with a pod the scheduler bound to its node:

1. admission: device-plugin resources of the *container requests* get one ``Allocate`` per container
   from the device manager (failure: ``UnexpectedAdmissionError``), then the resource predicate checks
   requests and overhead against the node object the kubelet last published (failure:
   ``OutOf<resource>``; kubernetes v1.34 ``pkg/kubelet/lifecycle/predicate.go``,
   :mod:`teesim.kubelet.admission`); either way the pod fails;
2. ``launch_delay`` later QEMU creates the guest and KVM charges one key in the pod's cgroup. A charge
   error is a failed launch: a Kata pod's sandbox is retried by the pod worker 10 to 15 s later
   (``pkg/kubelet/pod_workers.go``, :mod:`teesim.kubelet.podworkers`); a VMI is re-queued by
   virt-handler with its workqueue's back-off (kubevirt ``pkg/virt-handler/vm.go``,
   :mod:`teesim.cluster.virthandler`) unless the error fails it for good;
3. after its lifetime the guest stops, the key is uncharged and the pod succeeds; the kubelet frees the
   pod's devices lazily (the device manager's ``finish_pod``), DRA claims are released;
4. a restart: the device manager keeps only its checkpoint, pods bound meanwhile wait, and when the
   kubelet is back it admits again every pod it had admitted, in creation order
   (``HandlePodAdditions``, ``pkg/kubelet/kubelet.go`` v1.34), before the waiting ones; the plugins
   register again ``reregister_delay`` later, but for KubeVirt v1.9.0's TDX plugin, which does not
   (:class:`teesim.plugins.models.StaticPlugin`).

One instance per node. It talks to the simulation only through :class:`KubeletEnv`: the clock and
settings, the one retry random stream (shared by every node, so that a run draws in event order), the
failure sink, the kernel-change hook and the launch counters. The simulation keeps what is not a
kubelet's: set-up, arrivals, the scheduler's binding, faults and observation, as SimPy's environment
holds no domain logic. ``teesim serve`` passes in (``Simulation(node_kubelet=...)``) a subclass that admits
through the real gRPC kubelet; it is compiled with this one (teesim._native).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Protocol

from teesim.cluster import virthandler
from teesim.cluster.node import SimNode
from teesim.cluster.pods import CONSUMER_VALUE, GUEST_VALUE, Consumer, Phase, Pod
from teesim.engine.clock import VirtualClock
from teesim.kernel.misc import ChargeError
from teesim.kubelet.admission import AdmissionRejection, admission_need, check_fit, sanitize_allocatable
from teesim.kubelet.devicemanager import AllocationError, PodRef
from teesim.kubelet.podworkers import sandbox_retry_at

if TYPE_CHECKING:
    from teesim.sim.simulation import Failure, Settings


class KubeletEnv(Protocol):
    """What a node's kubelet needs from the simulation around it."""

    clock: VirtualClock
    settings: Settings
    retry_rng: random.Random
    launched: dict[str, int]
    completed: dict[str, int]

    def record_failure(
        self,
        node: SimNode,
        consumer: Consumer,
        resource: str,
        uid: str,
        kind: str,
        exc: Exception,
        since: float,
        until: float,
        attempt: int = 1,
        in_race: bool | None = None,
    ) -> Failure: ...

    def kernel_changed(self, node: SimNode, resource: str, consumer: Consumer, charged: bool = True) -> None: ...


def _created(pod: Pod) -> tuple[float, str]:
    return (pod.created, pod.uid)


# Compiled (teesim._native), and so is its subclass (teesim serve's ServeNodeKubelet): compiled code does not
# see an interpreted subclass's overrides (tests/simulator/test_native_subclasses.py).
class NodeKubelet:
    """The kubelet of ``node``: admits, launches, retries, stops and releases the pods bound there.

    ``served_dra``: the DRA-backed resource names whose overhead the DRA driver serves (KEP-5004), left
    out of the resource predicate; empty when the strategy serves none.
    """

    def __init__(
        self,
        env: KubeletEnv,
        node: SimNode,
        plugins: list,
        vmi_backoff: virthandler.Backoff,
        served_dra: frozenset[str] = frozenset(),
    ):
        self.env = env
        self.node = node
        self.plugins = plugins
        self.clock = env.clock
        self.settings = env.settings
        self.vmi_backoff = vmi_backoff
        self.served_dra = served_dra
        # Pods bound while the kubelet was down, admitted when it is back.
        self.waiting: list[Pod] = []

    @staticmethod
    def ref(pod: Pod) -> PodRef:
        return PodRef(pod.namespace, pod.name, pod.uid)

    def bound(self, pod: Pod) -> None:
        """The scheduler bound ``pod`` here: admit it now, or when the kubelet is back."""
        if self.node.kubelet_up:
            self.admit(pod)
        else:
            self.waiting.append(pod)

    # -- admission -----------------------------------------------------------------------------------
    def _plugin(self, resource: str):
        return next((p for p in self.plugins if p.resource_name == resource), None)

    def admit(self, pod: Pod) -> None:
        if self.allocate_devices(pod):
            self.admitted(pod)

    def allocate_devices(self, pod: Pod) -> bool:
        """The device manager's ``Allocate`` per container request; False (the pod failed) on error."""
        node = self.node
        ref, now = self.ref(pod), self.clock.now
        for resource, count in sorted(pod.requests.items()):
            if not node.devices.is_device_plugin_resource(resource, now):
                continue
            try:
                ids = node.devices.allocate(ref, pod.container, resource, count, now=now)
            except AllocationError as exc:
                self.admission_error(pod, exc)
                return False
            plugin = self._plugin(resource)
            if plugin is not None and ids:
                plugin.allocate(ids)
        return True

    def admission_error(self, pod: Pod, exc: AllocationError) -> None:
        message = f"UnexpectedAdmissionError: Allocate failed due to {exc}, which is unexpected"
        self.fail(pod, "admission", RuntimeError(message))

    def admitted(self, pod: Pod) -> None:
        """Devices allocated: the resource predicate, then the guest's launch ``launch_delay`` later."""
        rejection = self.predicate(pod)
        if rejection is not None:
            self.fail(pod, "admission", RuntimeError(str(rejection)))
            return
        self.node.devices.add_pod(self.ref(pod))
        if self.settings.overhead_counted_twice and pod.overhead:
            # The status manager posts the admitted pod's status at once; the informers see it api_latency later.
            self._after_api(partial(self.node.bound.status_posted, pod))
        self.clock.after(pod.launch_delay, lambda: self.launch(pod))

    def predicate(self, pod: Pod, admitted: Mapping[str, int] | None = None) -> AdmissionRejection | None:
        """The kubelet's resource predicate against the node object it last published; the other
        pods are those bound here, or ``admitted`` (what the pods admitted before need)."""
        node = self.node
        held = {r: len(node.devices.allocated_ids(r)) for r in pod.requests}
        holds = node.devices.holds_devices(self.ref(pod))
        allocatable = sanitize_allocatable(node.status_allocatable(), held, holds)
        overhead: Mapping[str, int] = pod.overhead  # read, never written
        if self.served_dra:
            overhead = {r: n for r, n in overhead.items() if r not in self.served_dra}
        need = admission_need(pod.requests, overhead, allocatable)
        if admitted is not None:
            return check_fit(need, allocatable, admitted)
        others = dict(node.requested())
        for resource, amount in pod.scheduled_need.items():
            others[resource] = others.get(resource, 0) - amount
        return check_fit(need, allocatable, others)

    # -- the guest -----------------------------------------------------------------------------------
    def launch(self, pod: Pod) -> None:
        if pod.phase is not Phase.BOUND:
            return
        node, clock = self.node, self.clock
        pod.attempts += 1
        if pod.first_launch_at is None:
            pod.first_launch_at = clock.now
        try:
            node.charge(pod.consumer, pod.cgroup, pod.misc_resource, GUEST_VALUE[pod.guest])
        except ChargeError as exc:
            if pod.consumer is Consumer.KATA:
                # FailedCreatePodSandBox: the pod worker retries the sandbox 10-15 s later, forever.
                self.attempt_failed(pod, exc)
                retry = sandbox_retry_at(clock.now, self.env.retry_rng)
                clock.at(retry, lambda: self.launch(pod))
            elif virthandler.fails_for_good(str(exc)):
                self.fail(pod, "launch", exc)
            else:
                # virt-handler's sync failed: AddRateLimited, 5 ms doubling to 1000 s, until it starts.
                self.attempt_failed(pod, exc)
                clock.after(self.vmi_backoff.delay(pod.attempts), lambda: self.launch(pod))
            return
        pod.phase, pod.started_at = Phase.RUNNING, clock.now
        node.bound.started(pod)
        self._after_api(partial(node.bound.observe_started, pod))
        self.env.launched[CONSUMER_VALUE[pod.consumer]] += 1
        self.env.kernel_changed(node, pod.misc_resource, pod.consumer)
        clock.after(pod.duration, lambda: self.stop(pod))

    def _after_api(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` when a write to the API server reaches the informers."""
        latency = self.settings.api_latency
        if latency > 0:
            self.clock.after(latency, callback)
        else:
            callback()

    def release(self, pod: Pod, was_running: bool) -> None:
        node = self.node
        delayed = self.settings.api_latency > 0
        if node.bound.release(pod, was_running, keep_seen=delayed) and delayed:
            self.clock.after(self.settings.api_latency, partial(node.bound.observe_released, pod))
        node.devices.finish_pod(self.ref(pod))
        for name in pod.dra_devices:
            node.dra[name].release(pod.uid)

    def stop(self, pod: Pod) -> None:
        if pod.phase is not Phase.RUNNING:
            return  # rejected when the kubelet restarted: its guest was stopped then
        node = self.node
        node.uncharge(pod.consumer, pod.cgroup, pod.misc_resource, GUEST_VALUE[pod.guest])
        pod.phase, pod.ended_at = Phase.SUCCEEDED, self.clock.now
        self.release(pod, was_running=True)
        self.env.completed[CONSUMER_VALUE[pod.consumer]] += 1
        self.env.kernel_changed(node, pod.misc_resource, pod.consumer, charged=False)

    # -- failures ------------------------------------------------------------------------------------
    def _window(self, pod: Pod) -> tuple[float, float]:
        """A pod's race window runs from its binding to its first launch: a retry fails because of
        what happened then, not because the node is busy later."""
        now = self.clock.now
        since = pod.bound_at if pod.bound_at is not None else now
        return since, pod.first_launch_at if pod.first_launch_at is not None else now

    def attempt_failed(self, pod: Pod, exc: Exception) -> None:
        since, until = self._window(pod)
        failure = self.env.record_failure(
            self.node,
            pod.consumer,
            pod.misc_resource,
            pod.uid,
            "launch",
            exc,
            since,
            until,
            pod.attempts,
            pod.in_race_window,
        )
        pod.in_race_window = failure.in_race_window

    def fail(self, pod: Pod, kind: str, exc: Exception, was_running: bool = False) -> None:
        pod.phase, pod.ended_at, pod.reason = Phase.FAILED, self.clock.now, str(exc)
        self.release(pod, was_running=was_running)
        since, until = self._window(pod)
        attempt = max(pod.attempts, 1)
        self.env.record_failure(
            self.node, pod.consumer, pod.misc_resource, pod.uid, kind, exc, since, until, attempt, pod.in_race_window
        )

    # -- restart -------------------------------------------------------------------------------------
    def restart(self) -> None:
        """The kubelet restarts: down for ``kubelet_restart_downtime``, then back (:meth:`back`)."""
        node = self.node
        node.devices.restart(self.clock.now)
        node.kubelet_up = False
        for plugin in self.plugins:
            plugin.kubelet_restarted()
        self.clock.after(self.settings.kubelet_restart_downtime, self.back)

    def back(self) -> None:
        node, clock = self.node, self.clock
        node.kubelet_up = True
        # fastStatusUpdateOnce: the first node status comes from the restored device manager,
        # whose stopped endpoints count 0 devices until their plugins register again.
        node.sync_status(clock.now)
        waiting, self.waiting = self.waiting, []
        self.readmit({id(p) for p in waiting})
        for pod in waiting:
            if pod.phase is Phase.BOUND:
                self.admit(pod)
        for plugin in self.plugins:
            clock.after(self.settings.reregister_delay, plugin.register)

    def readmit(self, skip: set[int]) -> None:
        """A restarted kubelet admits again every pod it had admitted (``HandlePodAdditions`` in
        ``pkg/kubelet/kubelet.go``, v1.34: the pods sorted by creation time, each through
        ``canAdmitPod`` against the pods admitted before it). The predicate counts requests and
        overhead against the node object; ``sanitizeNodeAllocatable`` raises a device-plugin resource
        to the devices pods hold only when *this* pod holds devices, so a pod that takes its key
        through overhead alone finds that resource at 0 while its plugin has not registered again and
        is rejected: its guest is stopped and the pod fails (``rejectPod``)."""
        node = self.node
        pods = sorted(
            (p for p in node.bound.pods() if id(p) not in skip and p.phase in (Phase.BOUND, Phase.RUNNING)),
            key=_created,
        )
        admitted: dict[str, int] = {}
        for pod in pods:
            rejection = self.predicate(pod, admitted)
            if rejection is None:
                for resource, amount in pod.scheduled_need.items():
                    admitted[resource] = admitted.get(resource, 0) + amount
                continue
            running = pod.phase is Phase.RUNNING
            if running:
                node.uncharge(pod.consumer, pod.cgroup, pod.misc_resource, GUEST_VALUE[pod.guest])
                self.env.kernel_changed(node, pod.misc_resource, pod.consumer, charged=False)
            self.fail(pod, "readmission", RuntimeError(str(rejection)), was_running=running)


# What builds a node's kubelet (:class:`NodeKubelet` or a compiled subclass): env, node, plugins, VMI back-off,
# the DRA-served names.
NodeKubeletFactory = Callable[[KubeletEnv, SimNode, list, virthandler.Backoff, frozenset[str]], NodeKubelet]
