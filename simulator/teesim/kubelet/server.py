"""A kubelet that speaks the real device-plugin and pod-resources protocols over real Unix sockets.

It serves ``v1beta1.Registration`` on ``<root>/var/lib/kubelet/device-plugins/kubelet.sock`` and
``v1.PodResourcesLister`` on ``<root>/var/lib/kubelet/pod-resources/kubelet.sock``, and drives the
pure :class:`~teesim.kubelet.devicemanager.DeviceManager` the way the real kubelet drives its own:

* ``Register`` validates version and resource name, then (still inside the call, as upstream's
  ``connectClient``) dials ``<device-plugins>/<endpoint>`` and calls ``GetDevicePluginOptions``; a
  plugin whose socket does not answer gets the error back. ``ListAndWatch`` then runs in its own
  thread; every response replaces the device list. When a stream ends, the kubelet disconnects the
  client registered for that resource *now* (upstream's ``runClient``): a plugin that registered
  again while its old stream was open loses its new connection when the old stream ends.
* :meth:`Kubelet.allocate` is pod admission for one container: choose devices, ask the plugin for
  its preferred allocation if it offers one (intersected with the free devices and topped up),
  call ``Allocate`` once for the container, record it. :meth:`Kubelet.start_container` calls
  ``PreStartContainer`` when the plugin asked for it.
* :meth:`Kubelet.restart` is a kubelet restart: connections drop, every socket in the
  device-plugins directory is deleted, ``kubelet.sock`` is created anew, allocations survive and
  every registered resource reads capacity 0 until its plugin registers again.
* Pod resources: ``List`` frees finished pods' devices first, ``GetAllocatableResources`` lists
  healthy devices only, ``Get`` of an unknown pod fails with upstream's words; all three share one
  100 QPS / burst 10 token bucket (``ResourceExhausted: rejected by rate limit``).
* ``GET /pods`` (:mod:`teesim.kubelet.podlist`) lists the pod objects bound to the node, with
  ``spec.overhead``: the view an informer gives an advertiser.

Only the kubelet's device-plugin path is modelled: pods are whatever the caller admits, and
RuntimeClass overhead never reaches the device manager, so it never shows in pod-resources.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from teesim.engine.clock import SIGNAL_CHECK_S
from teesim.kubelet import sockets
from teesim.kubelet.devicemanager import AllocationError, Device, DeviceManager, Endpoint, PodRef
from teesim.kubelet.generated.deviceplugin.v1beta1 import api_pb2 as dp
from teesim.kubelet.generated.deviceplugin.v1beta1 import api_pb2_grpc as dp_grpc
from teesim.kubelet.generated.podresources.v1 import api_pb2 as pr
from teesim.kubelet.generated.podresources.v1 import api_pb2_grpc as pr_grpc
from teesim.kubelet.gofmt import go_rpc_error
from teesim.kubelet.names import RegistrationError, check_registration
from teesim.kubelet.podlist import PodListServer, PodRegistry
from teesim.kubelet.ratelimit import RATE_LIMIT_MESSAGE, TokenBucket

log = logging.getLogger(__name__)
# Deadlines of the kubelet's calls into a plugin (None: none at all). PreStartContainer gets
# KubeletPreStartContainerRPCTimeoutInSecs = 30 (k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1/constants.go,
# applied in devicemanager/endpoint.go, v1.34); Allocate and GetPreferredAllocation run on the caller's
# context, which ManagerImpl.Allocate makes with context.TODO(): no deadline.
PRE_START_CONTAINER_TIMEOUT = 30.0
ALLOCATE_TIMEOUT: float | None = None
PREFERRED_ALLOCATION_TIMEOUT: float | None = None


@dataclass
class _PluginClient:
    """The kubelet's live connection to one plugin."""

    resource: str
    socket: Path
    channel: grpc.Channel
    stub: dp_grpc.DevicePluginStub
    generation: int
    options: dp.DevicePluginOptions
    thread: threading.Thread | None = None
    closing: bool = False


def _rpc_error_text(exc: grpc.RpcError) -> str:
    """What the Go kubelet's ``%v`` of this RPC error prints (``rpc error: code = ... desc = ...``)."""
    code = exc.code() if callable(getattr(exc, "code", None)) else None
    number = code.value[0] if isinstance(code, grpc.StatusCode) else grpc.StatusCode.UNKNOWN.value[0]
    details = exc.details() if callable(getattr(exc, "details", None)) else str(exc)
    return go_rpc_error(number, details or "")


def _plugin_call(method: Callable[..., Any], request: Any, timeout: float | None, wrap: str = "") -> Any:
    """One RPC to a plugin; its failure fails the pod's admission or the container's start.

    ``wrap`` is the kubelet's prefix for this call's error (empty: the error is returned as it is,
    as ``allocateContainerResources`` does with ``Allocate``'s).
    """
    try:
        return method(request, timeout=timeout)
    except grpc.RpcError as exc:
        raise AllocationError(f"{wrap}{_rpc_error_text(exc)}") from exc


class _Registration(dp_grpc.RegistrationServicer):
    def __init__(self, kubelet: Kubelet):
        self._kubelet = kubelet

    def Register(self, request, context):
        try:
            self._kubelet._register(request)
        except (RegistrationError, ValueError) as exc:
            reason = getattr(exc, "reason", str(exc))
            log.warning("registration of %s failed: %s (%s)", request.resource_name, exc, reason)
            # Upstream returns a plain error: gRPC status Unknown with the kubelet's sentence.
            context.abort(grpc.StatusCode.UNKNOWN, str(exc))
        return dp.Empty()


class _PodResources(pr_grpc.PodResourcesListerServicer):
    def __init__(self, kubelet: Kubelet):
        self._kubelet = kubelet

    def _admit_call(self, context) -> None:
        # The rate limit is a unary interceptor in front of every method, shared by every client.
        if not self._kubelet.pod_resources_limiter.allow(time.monotonic()):
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, RATE_LIMIT_MESSAGE)

    def List(self, request, context):
        self._admit_call(context)
        with self._kubelet._lock:
            dm = self._kubelet.device_manager
            dm.release_finished_pods()  # List calls UpdateAllocatedDevices before answering
            pods = [self._kubelet._pod_resources(pod) for pod in dm.active_pods()]
            self._kubelet.lists_answered += 1
            self._kubelet._changed.notify_all()
        return pr.ListPodResourcesResponse(pod_resources=pods)

    def GetAllocatableResources(self, request, context):
        self._admit_call(context)
        with self._kubelet._lock:
            dm = self._kubelet.device_manager
            devices = [
                # Upstream reports one ContainerDevices per device (per NUMA node, when known).
                pr.ContainerDevices(resource_name=resource, device_ids=[device.id])
                for resource in dm.capacity(now=self._kubelet.clock())
                for device in dm.allocatable_devices(resource)
            ]
        return pr.AllocatableResourcesResponse(devices=devices)

    def Get(self, request, context):
        self._admit_call(context)
        with self._kubelet._lock:
            # server_v1.go (v1.34) looks the pod up in the pod manager (GetPodByName), which keeps a
            # terminated pod until the API server deletes it, and does not call UpdateAllocatedDevices:
            # such a pod is answered with whatever devices the checkpoint still holds for it.
            obj = self._kubelet.pods.find(request.pod_namespace, request.pod_name)
            if obj is not None:
                return pr.GetPodResourcesResponse(pod_resources=self._kubelet._pod_resources(obj.ref))
        # A plain fmt.Errorf upstream, so the status code is Unknown.
        context.abort(grpc.StatusCode.UNKNOWN, f"pod {request.pod_name} in namespace {request.pod_namespace} not found")


class Kubelet:
    """The kubelet's device-plugin side on one node directory. Use as a context manager or call
    :meth:`start` / :meth:`stop`."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
        serve_pods: bool = True,
    ):
        self.root = Path(root)
        self.dir = sockets.kubelet_dir(root)
        self.plugin_dir = sockets.device_plugin_dir(self.dir)
        self.registration_socket = sockets.registration_socket(self.dir)
        self.pod_resources_socket = sockets.pod_resources_socket(self.dir)
        sockets.check_socket_path(self.registration_socket)
        sockets.check_socket_path(self.pod_resources_socket)
        self.clock = clock
        # How long Register waits for the plugin's socket to answer (upstream: 10 s).
        self.dial_timeout = sockets.DIAL_TIMEOUT
        self.device_manager = DeviceManager(rng or random.Random())
        self.pod_resources_limiter = TokenBucket()
        # pod-resources List calls answered: a test waits on it instead of on time.
        self.lists_answered = 0
        self.pods = PodRegistry()
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        # Pod admission is serial in the kubelet; plugin RPCs happen outside the state lock.
        self._admission = threading.Lock()
        self._clients: dict[str, _PluginClient] = {}
        self._containers: dict[str, list[str]] = {}
        self._registration_server: grpc.Server | None = None
        self._pod_resources_server: grpc.Server | None = None
        self._pod_list = PodListServer(self._pod_list_snapshot) if serve_pods else None
        self.registrations = 0
        self.updates = 0
        # time.monotonic() of the last ListAndWatch response that changed the device manager.
        self.updated_at = 0.0

    @property
    def state_changed(self) -> threading.Condition:
        """Notified after every change of the kubelet's state; its lock is the state lock, which every
        gRPC thread holds while it changes the device manager (``teesim serve`` runs under it)."""
        return self._changed

    @property
    def pods_url(self) -> str | None:
        """``http://127.0.0.1:PORT/pods``: the pod objects bound to this node (None when not served)."""
        return self._pod_list.url if self._pod_list is not None else None

    # -- lifecycle -----------------------------------------------------------------------------------

    def __enter__(self) -> Kubelet:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        self.pod_resources_socket.parent.mkdir(parents=True, exist_ok=True)
        self.clean_socket_dir()
        if self.pod_resources_socket.exists():
            self.pod_resources_socket.unlink()
        self._pod_resources_server = self._serve(
            self.pod_resources_socket,
            lambda s: pr_grpc.add_PodResourcesListerServicer_to_server(_PodResources(self), s),
        )
        self._registration_server = self._serve(
            self.registration_socket,
            lambda s: dp_grpc.add_RegistrationServicer_to_server(_Registration(self), s),
        )
        if self._pod_list is not None and not self._pod_list_started:
            self._pod_list.start()
            self._pod_list_started = True

    _pod_list_started = False

    def _serve(self, path: Path, add: Callable[[grpc.Server], None]) -> grpc.Server:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="kubelet"))
        add(server)
        if not server.add_insecure_port(sockets.socket_target(path)):
            raise OSError(f"cannot listen on {path}")
        server.start()
        return server

    def clean_socket_dir(self) -> list[str]:
        """Delete every socket in the device-plugins directory, as the kubelet does when it starts."""
        removed = []
        for entry in sorted(os.scandir(self.plugin_dir), key=lambda e: e.name):
            if sockets.is_socket(entry.path):
                os.unlink(entry.path)
                removed.append(entry.name)
        return removed

    def _drop_connections(self) -> None:
        with self._lock:
            clients = list(self._clients.values())
            self._clients.clear()
            for client in clients:
                client.closing = True
        for client in clients:
            client.channel.close()
        for client in clients:
            if client.thread is not None:
                client.thread.join(timeout=5)

    def stop(self, *, process_exit: bool = True) -> None:
        """The kubelet process exits: servers stop, plugin connections drop, sockets go away."""
        for server in (self._registration_server, self._pod_resources_server):
            if server is not None:
                server.stop(grace=None).wait(5)
        self._registration_server = self._pod_resources_server = None
        self._drop_connections()
        for path in (self.registration_socket, self.pod_resources_socket):
            if sockets.is_socket(path):
                path.unlink()
        if process_exit and self._pod_list is not None and self._pod_list_started:
            self._pod_list.stop()
            self._pod_list_started = False
            self._pod_list = PodListServer(self._pod_list_snapshot)

    def restart(self) -> None:
        """Stop, forget endpoints and device lists (the checkpoint keeps allocations and the names of
        registered resources), start again. The pod list (the API server's view) stays served."""
        self.stop(process_exit=False)
        with self._lock:
            self.device_manager.restart(now=self.clock())
            self._changed.notify_all()
        self.start()

    # -- registration and ListAndWatch ---------------------------------------------------------------

    def _register(self, request: dp.RegisterRequest) -> None:
        check_registration(request.resource_name, request.version)
        socket = self.plugin_dir / request.endpoint
        channel = sockets.channel(socket)
        try:
            options = self._connect(socket, channel)
        except BaseException:
            channel.close()
            raise
        with self._lock:
            endpoint = self.device_manager.register(
                request.resource_name,
                request.version,
                request.endpoint,
                pre_start_required=options.pre_start_required,
                get_preferred_allocation_available=options.get_preferred_allocation_available,
            )
            stub = dp_grpc.DevicePluginStub(channel)
            client = _PluginClient(request.resource_name, socket, channel, stub, endpoint.generation, options)
            # Upstream replaces the client in its map and leaves the previous one running: its
            # stream keeps feeding the resource until it ends (and then disconnects this one).
            self._clients[request.resource_name] = client
            self.registrations += 1
            self._changed.notify_all()
        client.thread = threading.Thread(
            target=self._list_and_watch, args=(client,), name=f"listandwatch-{client.resource}", daemon=True
        )
        client.thread.start()

    def _connect(self, socket: Path, channel: grpc.Channel) -> dp.DevicePluginOptions:
        """``client.Connect`` (plugin/v1beta1/client.go, k8s.io/kubernetes v1.37.2): ``dial`` blocks up to
        10 s for the connection and fails with ``failed to dial device plugin: <grpc's error>``, which for
        nobody serving the socket is the dial context's ``context deadline exceeded``; then
        ``PluginConnected`` (manager.go) asks for the options: ``failed to get device plugin options: %v``."""
        try:
            grpc.channel_ready_future(channel).result(timeout=self.dial_timeout)
        except grpc.FutureTimeoutError:
            raise RegistrationError(
                "failed to dial device plugin: context deadline exceeded",
                f"nothing answered at {socket} within {self.dial_timeout:g} s; is the plugin serving there?",
            ) from None
        stub = dp_grpc.DevicePluginStub(channel)
        try:
            return stub.GetDevicePluginOptions(dp.Empty(), timeout=self.dial_timeout)
        except grpc.RpcError as exc:
            raise RegistrationError(f"failed to get device plugin options: {_rpc_error_text(exc)}") from exc

    def _list_and_watch(self, client: _PluginClient) -> None:
        try:
            for response in client.stub.ListAndWatch(dp.Empty()):
                devices = [Device(d.ID, d.health) for d in response.devices]
                with self._lock:
                    if self.device_manager.update_devices(client.resource, devices, client.generation):
                        self.updates += 1
                        self.updated_at = time.monotonic()
                        self._changed.notify_all()
            reason = "stream ended"
        except (grpc.RpcError, ValueError) as exc:
            # ValueError: the channel was closed under the stream (restart, disconnect).
            reason = f"stream broke: {exc}"
        log.info("ListAndWatch of %s (generation %d): %s", client.resource, client.generation, reason)
        self._stream_ended(client)

    def _stream_ended(self, client: _PluginClient) -> None:
        """``runClient`` after ``Run`` returns: disconnect whichever client holds the name now."""
        with self._lock:
            current = self._clients.get(client.resource)
            if client.closing and current is not client:
                return  # the kubelet itself closed it (restart): that kubelet process is gone
            if self.device_manager.stream_broken(client.resource, client.generation, now=self.clock()):
                self._changed.notify_all()
            if current is not None:
                del self._clients[client.resource]
                current.closing = True
        if current is not None and current is not client:
            log.warning(
                "the ended stream of %s (generation %d) disconnected the newer registration (generation %d)",
                client.resource,
                client.generation,
                current.generation,
            )
            current.channel.close()
        if not client.closing or current is client:
            client.channel.close()

    # -- pods ----------------------------------------------------------------------------------------

    def _live_client(self, resource: str) -> _PluginClient:
        """The client behind ``m.endpoints[resource]``; raises the kubelet's words for a missing or a
        stopped endpoint (``allocateContainerResources``, ``endpointImpl.allocate``, v1.34)."""
        endpoint = self.device_manager.endpoint(resource)
        if endpoint is None or not self.device_manager.registered(resource, self.clock()):
            raise AllocationError(f"unknown Device Plugin {resource}")
        client = self._clients.get(resource)
        if endpoint.stopped or client is None or client.generation != endpoint.generation:
            raise AllocationError(endpoint.stopped_error())
        return client

    def _choose(self, pod: PodRef, container: str, resource: str, count: int) -> tuple[list[str], _PluginClient]:
        """Pick the devices (asking the plugin for its preference) without recording them."""
        with self._lock:
            dm = self.device_manager
            dm.release_finished_pods()
            ids = dm.devices_to_allocate(pod, container, resource, count, now=self.clock())
            endpoint = dm.endpoint(resource)
            ask = endpoint is not None and endpoint.options_known and endpoint.get_preferred_allocation_available
            client = self._clients.get(resource) if ask else None
            available = sorted(set(dm.healthy_ids(resource)) - dm.allocated_ids(resource))
        if ask:
            preferred = self._preferred(client, endpoint, available, count)
            with self._lock:
                ids = self.device_manager.devices_to_allocate(pod, container, resource, count, preferred)
        with self._lock:
            return ids, self._live_client(resource)

    def allocate(self, pod: PodRef, container: str, resource: str, count: int) -> dp.ContainerAllocateResponse:
        """Admit one container's request for ``count`` devices of ``resource`` (raises AllocationError)."""
        with self._admission:
            with self._lock:
                held = self.device_manager.pod_devices(pod).get(container, {}).get(resource)
                self.pods.upsert(pod).containers.setdefault(container, {})[resource] = count
                if held is not None or count == 0:
                    # Re-admission: the held devices must all still be healthy.
                    self.device_manager.devices_to_allocate(pod, container, resource, count, now=self.clock())
                    self._note_container(pod, container)
                    return dp.ContainerAllocateResponse()
            ids, client = self._choose(pod, container, resource, count)
            request = dp.AllocateRequest(container_requests=[dp.ContainerAllocateRequest(devices_ids=ids)])
            # allocateContainerResources returns Allocate's error as it is (no prefix).
            response = _plugin_call(client.stub.Allocate, request, ALLOCATE_TIMEOUT)
            if not response.container_responses:
                raise AllocationError(f"no containers return in allocation response {response}")
            with self._lock:
                self.device_manager.record_allocation(pod, container, resource, ids)
                self._note_container(pod, container)
                self._changed.notify_all()
            return response.container_responses[0]

    def start_container(self, pod: PodRef, container: str) -> int:
        """The runtime is about to start the container (``GetDeviceRunContainerOptions``, manager.go, v1.34):
        for every device-plugin resource the container requests, ``callPreStartContainerIfNeeded``.
        Returns the number of ``PreStartContainer`` calls made; raises with the kubelet's words.

        A stopped endpoint refuses (``endpoint ... has been stopped``); one restored from the checkpoint
        after a restart has no options and is skipped; one past its grace period is not found.
        """
        calls = []
        with self._lock:
            dm, now = self.device_manager, self.clock()
            obj = self.pods.get(pod)
            requests = obj.containers.get(container, {}) if obj is not None else {}
            for resource, count in sorted(requests.items()):
                if count == 0 or not dm.is_device_plugin_resource(resource, now):
                    continue
                devices = dm.pre_start_devices(pod, container, resource, now=now)
                if devices is not None:
                    calls.append((resource, devices, self._clients.get(resource)))
        for resource, devices, client in calls:
            prefix = "device plugin PreStartContainer rpc failed with err: "
            if client is None:
                raise AllocationError(prefix + self.device_manager.endpoint(resource).stopped_error())
            request = dp.PreStartContainerRequest(devices_ids=devices)
            _plugin_call(client.stub.PreStartContainer, request, PRE_START_CONTAINER_TIMEOUT, prefix)
        return len(calls)

    def _preferred(
        self, client: _PluginClient | None, endpoint: Endpoint, available: list[str], count: int
    ) -> list[str] | None:
        prefix = "device plugin GetPreferredAllocation rpc failed with err: "
        if endpoint.stopped or client is None:
            raise AllocationError(prefix + endpoint.stopped_error())
        request = dp.PreferredAllocationRequest(
            container_requests=[
                dp.ContainerPreferredAllocationRequest(available_deviceIDs=available, allocation_size=count)
            ]
        )
        # callGetPreferredAllocationIfAvailable: a failing preference fails the admission too.
        response = _plugin_call(client.stub.GetPreferredAllocation, request, PREFERRED_ALLOCATION_TIMEOUT, prefix)
        if not response.container_responses:
            return None
        return list(response.container_responses[0].deviceIDs)

    def _note_container(self, pod: PodRef, container: str) -> None:
        """The container is admitted: the pod is active for pod-resources and listed as running."""
        self.device_manager.add_pod(pod)
        names = self._containers.setdefault(pod.key, [])
        if container not in names:
            names.append(container)
        obj = self.pods.upsert(pod)
        obj.phase = "Running"
        obj.containers.setdefault(container, {})

    def add_pod(
        self,
        pod: PodRef,
        containers: list[str] | tuple[str, ...] = (),
        *,
        overhead: dict[str, int] | None = None,
        runtime_class: str | None = None,
        sandbox_ready: bool = True,
    ) -> None:
        """A pod that holds no device-plugin devices (e.g. a Kata pod charged through overhead).
        ``sandbox_ready=False``: bound and admitted, but its sandbox (a Kata VM) does not exist yet."""
        with self._lock:
            for name in containers or ("main",):
                self._note_container(pod, name)
            obj = self.pods.upsert(pod)
            obj.overhead = dict(overhead or {})
            obj.runtime_class = runtime_class
            self._set_sandbox(obj, sandbox_ready)
            self._changed.notify_all()

    @staticmethod
    def _set_sandbox(obj, ready: bool) -> None:
        obj.sandbox_ready = ready
        obj.phase = "Running" if ready else "Pending"

    def set_sandbox_ready(self, pod: PodRef, ready: bool = True) -> None:
        """RunPodSandbox succeeded (``True``) or the sandbox is gone / being retried (``False``)."""
        with self._lock:
            self._set_sandbox(self.pods.upsert(pod), ready)
            self._changed.notify_all()

    def finish_pod(self, pod: PodRef) -> None:
        """The pod terminated; its devices are released at the next admission (never told to plugins)."""
        with self._lock:
            self.device_manager.finish_pod(pod)
            self.pods.finish(pod)
            self._changed.notify_all()

    def delete_pod(self, pod: PodRef) -> None:
        """The API server deleted the pod: the pod manager forgets it (``Get`` then fails with "not
        found"); a pod deleted while running is finished first."""
        with self._lock:
            self.device_manager.finish_pod(pod)
            self.pods.delete(pod)
            self._containers.pop(pod.key, None)
            self._changed.notify_all()

    def _pod_list_snapshot(self) -> dict[str, Any]:
        with self._lock:
            return self.pods.pod_list()

    def _pod_resources(self, pod: PodRef) -> pr.PodResources:
        devices = self.device_manager.pod_devices(pod)
        containers = []
        names = self._containers.get(pod.key)
        if names is None:
            obj = self.pods.get(pod)
            names = list(obj.containers) if obj is not None else []
        for name in names:
            per_resource = devices.get(name, {})
            containers.append(
                pr.ContainerResources(
                    name=name,
                    devices=[
                        pr.ContainerDevices(resource_name=resource, device_ids=[device_id])
                        for resource, ids in sorted(per_resource.items())
                        for device_id in ids
                    ],
                )
            )
        return pr.PodResources(name=pod.name, namespace=pod.namespace, containers=containers)

    # -- observation ---------------------------------------------------------------------------------

    def snapshot(self) -> dict[str, dict[str, list[str]]]:
        """resource -> {"healthy": [...], "unhealthy": [...]} as the kubelet sees it now."""
        with self._lock:
            dm = self.device_manager
            return {res: {"healthy": dm.healthy_ids(res), "unhealthy": dm.unhealthy_ids(res)} for res in dm.resources()}

    def connected(self, resource: str) -> bool:
        with self._lock:
            return resource in self._clients

    def wait_for(self, predicate: Callable[[Kubelet], bool], timeout: float) -> bool:
        """Block until ``predicate(self)`` holds (checked after every state change) or ``timeout``."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not predicate(self):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                # In slices: the kernel may deliver SIGTERM to a gRPC thread, which wakes no wait of this one;
                # Python runs the handler (serve's stop) only when the main thread next returns to Python code.
                self._changed.wait(min(left, SIGNAL_CHECK_S))
            return True
