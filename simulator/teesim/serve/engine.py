"""The serve engine: :class:`Simulation` on a paced clock, a real node tree and the real-socket kubelet.

What changes against ``teesim run`` (everything else is the same code):

* **strategy** (:class:`ServedStrategy`): no in-process device plugin; a VMI requests, and a Kata
  RuntimeClass's overhead names, the resources the scenario's ``serve:`` section gives; NFD's rule
  runs in-process when ``serve.nfd`` is true (a double-pool node by default).
* **device manager**: the node's is the :class:`~teesim.kubelet.server.Kubelet`'s, so capacity and
  allocatable come from whatever plugins registered over the socket. Its change callback runs on
  gRPC threads; it only raises a flag, and the engine takes the change in on its own thread.
* **admission**: each device-plugin request is the kubelet's real ``Allocate`` (and
  ``GetPreferredAllocation``) to the plugin, made with the kubelet's lock released; it is queued by
  the scheduler's bind and made right after the event, as the kubelet's pod worker does.
* **kernel**: after every event that changed the misc controller its files are written under the
  root (:class:`~teesim.kernel.backends.NodeWriter`, only changed files, atomically replaced), so a
  plugin polling ``sys/fs/cgroup/misc.current`` sees a guest's key when it is charged.
* **containers**: before a pod's container starts, the kubelet calls ``PreStartContainer`` on the plugin
  when its options set ``pre_start_required`` (:meth:`~teesim.kubelet.server.Kubelet.start_container`).
* **pods**: the kubelet's ``/pods`` lists each admitted pod with its ``spec.overhead``; a Kata pod's
  sandbox turns ready when its guest charged its key.

Compiled with the classes it subclasses (teesim._native): compiled code does not see an interpreted
subclass's class attributes, so the kubelets are passed in (``Simulation(node_kubelet=...)``).

Not modelled in serve (refused or documented): faults (an external plugin cannot be crashed by the
scenario), more than one node, DRA, KubeVirt's generic ``/dev/sev`` plugin.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field

from teesim._collection import KUBEVIRT_KEYS
from teesim.cluster import virthandler
from teesim.cluster.node import SimNode
from teesim.cluster.pods import Phase, Pod
from teesim.kernel.backends import NodeWriter
from teesim.kubelet.devicemanager import AllocationError
from teesim.kubelet.podworkers import sandbox_retry_at
from teesim.kubelet.server import Kubelet
from teesim.serve.clock import AfterEach, PacedClock
from teesim.serve.strategy import ServedStrategy, check_servable
from teesim.sim.node_kubelet import KubeletEnv, NodeKubelet
from teesim.sim.scenario import Scenario, ServeSpec
from teesim.sim.simulation import Simulation


@dataclass
class _Inbox:
    """What the gRPC threads tell the engine (written and read under the kubelet's lock)."""

    devices_changed: bool = False
    admissions: deque[tuple[SimNode, Pod]] = field(default_factory=deque)


class ServeNodeKubelet(NodeKubelet):
    """The node's kubelet, for real: admission goes through the gRPC kubelet (``Allocate`` on the plugin's
    socket), and what its ``/pods`` shows follows the pod's life. Compiled with :class:`NodeKubelet`
    (teesim._native): an interpreted subclass's overrides would not be seen by the compiled simulation."""

    def __init__(
        self,
        serve: ServeSimulation,
        node: SimNode,
        plugins: list,
        vmi_backoff: virthandler.Backoff,
        served_dra: frozenset[str] = frozenset(),
    ):
        super().__init__(serve, node, plugins, vmi_backoff, served_dra)
        self.serve = serve
        # Pods whose container the runtime started (PreStartContainer made, when the plugin wants it).
        self.containers_started: set[str] = set()

    def admit(self, pod: Pod) -> None:
        # Bound inside the scheduler's pass: the kubelet admits it right after this event.
        self.serve.inbox.admissions.append((self.node, pod))

    def allocate_devices(self, pod: Pod) -> bool:
        node, kubelet, lock = self.node, self.serve.kubelet, self.serve.lock
        ref, now = self.ref(pod), self.clock.now
        # Bound, not started: the kubelet lists the pod (its sandbox not there) before admitting it, so
        # a plugin reading /pods never takes a device allocated below for a started guest's.
        kubelet.set_sandbox_ready(ref, False)
        for resource, count in sorted(pod.requests.items()):
            if not node.devices.is_device_plugin_resource(resource, now):
                continue
            # The plugin's Allocate may call back into the kubelet (pod-resources): no lock held.
            lock.release()
            try:
                kubelet.allocate(ref, pod.container, resource, count)
            except AllocationError as exc:
                failure: AllocationError | None = exc
            else:
                failure = None
            finally:
                lock.acquire()
            if failure is not None:
                self.admission_error(pod, failure)
                return False
        return True

    def admitted(self, pod: Pod) -> None:
        super().admitted(pod)
        if pod.phase is Phase.BOUND:
            # What /pods shows: the pod with its overhead, its sandbox not there yet.
            self.serve.kubelet.add_pod(
                self.ref(pod),
                [pod.container],
                overhead=pod.overhead,
                runtime_class=pod.runtime_class,
                sandbox_ready=False,
            )

    def launch(self, pod: Pod) -> None:
        if pod.phase is Phase.BOUND and pod.uid not in self.containers_started:
            failure = self._start_container(pod)
            if failure is not None:
                self._container_start_failed(pod, failure)
                return
            self.containers_started.add(pod.uid)
        super().launch(pod)
        if pod.phase is Phase.RUNNING and pod.started_at == self.clock.now:
            self.serve.kubelet.set_sandbox_ready(self.ref(pod), True)

    def _start_container(self, pod: Pod) -> AllocationError | None:
        """The runtime is about to start the pod's container: ``startContainer`` -> ``generateContainerConfig``
        -> ``GetDeviceRunContainerOptions``, which calls ``callPreStartContainerIfNeeded`` for each device-plugin
        resource (kuberuntime_container.go, cm/devicemanager/manager.go, k8s.io/kubernetes v1.37.2):
        ``PreStartContainer`` on the plugin when its options set ``pre_start_required``. The RPC is made
        without the engine's lock (the plugin may call pod-resources)."""
        lock = self.serve.lock
        lock.release()
        try:
            self.serve.kubelet.start_container(self.ref(pod), pod.container)
        except AllocationError as exc:
            failure: AllocationError | None = exc
        else:
            failure = None
        finally:
            lock.acquire()
        return failure

    def _container_start_failed(self, pod: Pod, exc: AllocationError) -> None:
        # CreateContainerConfigError: the pod worker requeues the pod 10-15 s later (pod_workers.go,
        # backOffPeriod with workerBackOffPeriodJitterFactor 0.5, v1.37.2), and starts the container again.
        pod.attempts += 1
        if pod.first_launch_at is None:
            pod.first_launch_at = self.clock.now
        self.attempt_failed(pod, exc)
        self.clock.at(sandbox_retry_at(self.clock.now, self.serve.retry_rng), lambda: self.launch(pod))

    def release(self, pod: Pod, was_running: bool) -> None:
        super().release(pod, was_running)
        self.serve.kubelet.finish_pod(self.ref(pod))


def _serve_node_kubelet(
    env: KubeletEnv, node: SimNode, plugins: list, backoff: virthandler.Backoff, served: frozenset[str]
) -> NodeKubelet:
    assert isinstance(env, ServeSimulation)
    return ServeNodeKubelet(env, node, plugins, backoff, served)


class ServeSimulation(Simulation):
    """One node of ``scenario`` in real time against ``kubelet`` (started, rooted where the files go).
    Compiled with :class:`Simulation` (teesim._native); its kubelets are passed in, not a class attribute."""

    def __init__(self, scenario: Scenario, kubelet: Kubelet, writer: NodeWriter):
        check_servable(scenario)
        served = ServedStrategy.of(scenario.serve or ServeSpec(dict(KUBEVIRT_KEYS), {}, True))
        super().__init__(scenario.world, served, node_kubelet=_serve_node_kubelet)
        self.served = served
        self.kubelet = kubelet
        self.writer = writer
        self.lock = kubelet.state_changed
        self.paced = PacedClock(kubelet.state_changed)
        self.paced.hooks = self
        self.clock = self.paced
        self.inbox = _Inbox()
        self._engine_thread = threading.get_ident()
        (self.node,) = self.nodes.values()
        # The node's device manager is the real kubelet's: registered plugins are what it counts.
        kubelet.device_manager.on_change = self._devices_changed_elsewhere
        self.node.devices = kubelet.device_manager
        kubelet.clock = self.paced.elapsed
        self._written_revision: object = None
        self.sync_files()

    def plugin_resources(self) -> list[tuple[str, str]]:
        """(misc resource, name) external plugins must advertise here: those with keys on this node."""
        return [(m, n) for m, n in self.served.plugin_resources() if self.node.capacity(m) > 0]

    # -- what the gRPC threads bring in ------------------------------------------------------------
    def _devices_changed_elsewhere(self) -> None:
        if threading.get_ident() == self._engine_thread:
            self.node.devices_changed()  # the engine's own change (an allocation, a pod's end): now
        else:
            self.inbox.devices_changed = True  # a gRPC thread's: taken in by before()

    def before(self) -> None:
        if self.inbox.devices_changed:
            self.inbox.devices_changed = False
            self.node.devices_changed()

    def has_news(self) -> bool:
        return self.inbox.devices_changed or bool(self.inbox.admissions)

    def settle(self, now: float, after_each: AfterEach | None) -> None:
        self.sync_files()
        while self.inbox.admissions:
            node, pod = self.inbox.admissions.popleft()
            kubelet = self.kubelets[node.name]
            if pod.phase is Phase.BOUND and kubelet.allocate_devices(pod):
                kubelet.admitted(pod)
            self.before()
            self.sync_files()
            if after_each is not None:
                after_each(self.clock.now)

    def sync_files(self) -> None:
        """Write the kernel's files when the misc controller changed since the last write."""
        revision = self.node.files_revision()
        if revision != self._written_revision:
            self.writer.sync(self.node.kernel.files())
            self._written_revision = revision


def registered(kubelet: Kubelet, resources: list[str]) -> dict[str, bool]:
    """Which of ``resources`` a plugin registered and sent a device list for."""
    snapshot = kubelet.snapshot()
    return {r: r in snapshot and kubelet.connected(r) for r in resources}
