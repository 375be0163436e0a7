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
* **pods**: the kubelet's ``/pods`` lists each admitted pod with its ``spec.overhead``; a Kata pod's
  sandbox turns ready when its guest charged its key.

Not modelled in serve (refused or documented): faults (an external plugin cannot be crashed by the
scenario), more than one node, DRA, KubeVirt's generic ``/dev/sev`` plugin.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field

from teesim._collection import KUBEVIRT_KEYS
from teesim.cluster.nfd import NFD_RESOURCES
from teesim.cluster.node import SimNode
from teesim.cluster.pods import Consumer, Guest, Phase, Pod
from teesim.kernel.backends import NodeWriter
from teesim.kubelet.devicemanager import AllocationError
from teesim.kubelet.server import Kubelet
from teesim.serve.clock import AfterEach, PacedClock
from teesim.sim.node_kubelet import NodeKubelet
from teesim.sim.scenario import Scenario, ServeSpec
from teesim.sim.simulation import Simulation
from teesim.strategies.base import SEV_DEVICE, Advertiser, NodeLayout, Role, Strategy

SERVED = "external-plugin"


@dataclass(frozen=True)
class ServedStrategy(Strategy):
    """The accounting the scenario's ``serve:`` section describes, advertised by external plugins."""

    vmi_names: tuple[tuple[str, str], ...] = ()
    kata_names: tuple[tuple[str, str], ...] = ()
    nfd: bool = True

    @classmethod
    def of(cls, spec: ServeSpec) -> ServedStrategy:
        kata = ", ".join(f"{m}: {n}" for m, n in sorted(spec.kata.items())) or "no key"
        vmi = ", ".join(f"{m}: {n}" for m, n in sorted(spec.kubevirt.items())) or "no key"
        nfd = "NFD's rule advertises Kata's names from misc.capacity" if spec.nfd else "no NFD key rule"
        return cls(
            SERVED,
            f"external device plugin(s) in real time; VMIs request {vmi}; Kata overhead {kata}; {nfd}",
            "external",
            Advertiser.EXTERNAL,
            "external",
            vmi_names=tuple(sorted(spec.kubevirt.items())),
            kata_names=tuple(sorted(spec.kata.items())),
            nfd=spec.nfd,
        )

    def vmi_key_name(self, misc_resource: str) -> str:
        # A misc resource VMIs request nothing for is still plotted under KubeVirt's name.
        return dict(self.vmi_names).get(misc_resource) or KUBEVIRT_KEYS.get(misc_resource, SEV_DEVICE)

    def kata_key_name(self, misc_resource: str) -> str | None:
        return dict(self.kata_names).get(misc_resource)

    def vmi_requests(self, guest: Guest) -> dict[str, int]:
        name = dict(self.vmi_names).get(guest.misc_resource)
        return {name: 1} if name else {}

    def layout(self, misc_resource: str, role: Role = Role.BOTH) -> NodeLayout:
        nfd = self.nfd and misc_resource in NFD_RESOURCES
        return NodeLayout(plugin=None, nfd_keys=nfd, nfd_reserved=False, sev_device=False)

    def accounted(self, misc_resource: str) -> frozenset[str]:
        users = {Consumer.KUBEVIRT.value}
        kata = self.kata_key_name(misc_resource)
        if kata is not None and kata == dict(self.vmi_names).get(misc_resource):
            users.add(Consumer.KATA.value)
        return frozenset(users)

    def plugin_resources(self) -> list[tuple[str, str]]:
        """(misc resource, name) the scenario's consumers request that NFD does not serve: the external
        plugins' job."""
        nfd = set(NFD_RESOURCES.values()) if self.nfd else set()
        return sorted({(m, n) for m, n in self.vmi_names + self.kata_names if n not in nfd})


def check_servable(scenario: Scenario) -> None:
    """What serve cannot run, refused before anything starts (a ValueError saying what to change)."""
    world = scenario.world
    where = f"{scenario.source}"
    if len(world.nodes) != 1:
        raise ValueError(f"{where}: teesim serve runs one node, the scenario has {len(world.nodes)}; keep one")
    if world.faults:
        raise ValueError(
            f"{where}: teesim serve cannot inject faults (an external plugin is not the scenario's to crash); "
            "remove the faults: list"
        )
    if not world.nodes[0].profile.has_misc:
        raise ValueError(f"{where}: kernel profile {world.nodes[0].profile.name!r} has no misc controller")


@dataclass
class _Inbox:
    """What the gRPC threads tell the engine (written and read under the kubelet's lock)."""

    devices_changed: bool = False
    admissions: deque[tuple[SimNode, Pod]] = field(default_factory=deque)


class ServeNodeKubelet(NodeKubelet):
    """The node's kubelet, for real: admission goes through the gRPC kubelet (``Allocate`` on the plugin's
    socket), and what its ``/pods`` shows follows the pod's life."""

    env: ServeSimulation

    def admit(self, pod: Pod) -> None:
        # Bound inside the scheduler's pass: the kubelet admits it right after this event.
        self.env.inbox.admissions.append((self.node, pod))

    def allocate_devices(self, pod: Pod) -> bool:
        node, kubelet, lock = self.node, self.env.kubelet, self.env.lock
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
            self.env.kubelet.add_pod(
                self.ref(pod),
                [pod.container],
                overhead=pod.overhead,
                runtime_class=pod.runtime_class,
                sandbox_ready=False,
            )

    def launch(self, pod: Pod) -> None:
        super().launch(pod)
        if pod.phase is Phase.RUNNING and pod.started_at == self.clock.now:
            self.env.kubelet.set_sandbox_ready(self.ref(pod), True)

    def release(self, pod: Pod, was_running: bool) -> None:
        super().release(pod, was_running)
        self.env.kubelet.finish_pod(self.ref(pod))


class ServeSimulation(Simulation):
    """One node of ``scenario`` in real time against ``kubelet`` (started, rooted where the files go)."""

    strategy: ServedStrategy
    node_kubelet_class = ServeNodeKubelet

    def __init__(self, scenario: Scenario, kubelet: Kubelet, writer: NodeWriter):
        check_servable(scenario)
        strategy = ServedStrategy.of(scenario.serve or ServeSpec(dict(KUBEVIRT_KEYS), {}, True))
        super().__init__(scenario.world, strategy)
        self.kubelet = kubelet
        self.writer = writer
        self.lock = kubelet.state_changed
        self.clock = PacedClock(kubelet.state_changed)
        self.clock.hooks = self
        self.inbox = _Inbox()
        self._thread = threading.get_ident()
        (self.node,) = self.nodes.values()
        # The node's device manager is the real kubelet's: registered plugins are what it counts.
        kubelet.device_manager.on_change = self._devices_changed_elsewhere
        self.node.devices = kubelet.device_manager
        kubelet.clock = self.clock.elapsed
        self._written_revision: object = None
        self.sync_files()

    def plugin_resources(self) -> list[tuple[str, str]]:
        """(misc resource, name) external plugins must advertise here: those with keys on this node."""
        return [(m, n) for m, n in self.strategy.plugin_resources() if self.node.capacity(m) > 0]

    # -- what the gRPC threads bring in ------------------------------------------------------------
    def _devices_changed_elsewhere(self) -> None:
        if threading.get_ident() == self._thread:
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
