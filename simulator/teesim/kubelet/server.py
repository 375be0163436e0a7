"""A kubelet that speaks the real device-plugin and pod-resources protocols over real Unix sockets.

It serves ``v1beta1.Registration`` on ``<root>/var/lib/kubelet/device-plugins/kubelet.sock`` and
``v1.PodResourcesLister`` on ``<root>/var/lib/kubelet/pod-resources/kubelet.sock``, and drives the
pure :class:`~teesim.kubelet.devicemanager.DeviceManager` the way the real kubelet drives its own:

* ``Register`` validates version and resource name, then (still inside the call, as upstream's
  ``connectClient``) dials ``<device-plugins>/<endpoint>`` and calls ``GetDevicePluginOptions``; a
  plugin whose socket does not answer gets the error back. ``ListAndWatch`` then runs in its own
  thread; every response replaces the device list; the stream's end marks every device unhealthy.
* :meth:`Kubelet.allocate` is pod admission for one container: choose devices, ask the plugin for
  its preferred allocation if it offers one, call ``Allocate`` once for the container, record it.
* :meth:`Kubelet.restart` is a kubelet restart: connections drop, every socket in the
  device-plugins directory is deleted, ``kubelet.sock`` is created anew, allocations survive.

Only the kubelet's device-plugin path is modelled: pods are whatever the caller admits, and
RuntimeClass overhead never reaches the device manager, so it never shows in pod-resources.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from teesim.kubelet import sockets
from teesim.kubelet.devicemanager import (
    AllocationError,
    Device,
    DeviceManager,
    PodRef,
    RegistrationError,
    check_registration,
    natural_key,
)
from teesim.kubelet.generated.deviceplugin.v1beta1 import api_pb2 as dp
from teesim.kubelet.generated.deviceplugin.v1beta1 import api_pb2_grpc as dp_grpc
from teesim.kubelet.generated.podresources.v1 import api_pb2 as pr
from teesim.kubelet.generated.podresources.v1 import api_pb2_grpc as pr_grpc

log = logging.getLogger(__name__)
RPC_TIMEOUT = 10.0


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


def _plugin_call(what: str, method: Callable[..., Any], request: Any) -> Any:
    """One admission-time RPC to a plugin; its failure fails the pod's admission."""
    try:
        return method(request, timeout=RPC_TIMEOUT)
    except grpc.RpcError as exc:
        raise AllocationError(f"{what} failed: {exc.details()}") from exc


class _Registration(dp_grpc.RegistrationServicer):
    def __init__(self, kubelet: Kubelet):
        self._kubelet = kubelet

    def Register(self, request, context):
        try:
            self._kubelet._register(request)
        except (RegistrationError, ValueError) as exc:
            message = str(exc)
            log.warning("registration of %s failed: %s", request.resource_name, message)
            context.abort(grpc.StatusCode.UNKNOWN, message)
        return dp.Empty()


class _PodResources(pr_grpc.PodResourcesListerServicer):
    def __init__(self, kubelet: Kubelet):
        self._kubelet = kubelet

    def List(self, request, context):
        with self._kubelet._lock:
            dm = self._kubelet.device_manager
            pods = [self._kubelet._pod_resources(pod) for pod in dm.active_pods()]
        return pr.ListPodResourcesResponse(pod_resources=pods)

    def GetAllocatableResources(self, request, context):
        with self._kubelet._lock:
            dm = self._kubelet.device_manager
            devices = [
                # Upstream reports one ContainerDevices per device (per NUMA node, when known).
                pr.ContainerDevices(resource_name=resource, device_ids=[device.id])
                for resource in dm.capacity(now=self._kubelet.clock())
                for device in dm.all_devices(resource)
            ]
        return pr.AllocatableResourcesResponse(devices=devices)

    def Get(self, request, context):
        with self._kubelet._lock:
            pod = self._kubelet.device_manager.find_pod(request.pod_namespace, request.pod_name)
            if pod is not None:
                return pr.GetPodResourcesResponse(pod_resources=self._kubelet._pod_resources(pod))
        context.abort(grpc.StatusCode.NOT_FOUND, f"pod {request.pod_name} not found in {request.pod_namespace}")


class Kubelet:
    """The kubelet's device-plugin side on one node directory. Use as a context manager or call
    :meth:`start` / :meth:`stop`."""

    def __init__(self, root: str | os.PathLike[str], *, clock: Callable[[], float] = time.monotonic):
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
        self.device_manager = DeviceManager()
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        # Pod admission is serial in the kubelet; plugin RPCs happen outside the state lock.
        self._admission = threading.Lock()
        self._clients: dict[str, _PluginClient] = {}
        self._containers: dict[str, list[str]] = {}
        self._registration_server: grpc.Server | None = None
        self._pod_resources_server: grpc.Server | None = None
        self.registrations = 0
        self.updates = 0
        # time.monotonic() of the last ListAndWatch response that changed the device manager.
        self.updated_at = 0.0

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
            client.channel.close()
        for client in clients:
            if client.thread is not None:
                client.thread.join(timeout=5)

    def stop(self) -> None:
        """The kubelet process exits: servers stop, plugin connections drop, sockets go away."""
        for server in (self._registration_server, self._pod_resources_server):
            if server is not None:
                server.stop(grace=None).wait(5)
        self._registration_server = self._pod_resources_server = None
        self._drop_connections()
        for path in (self.registration_socket, self.pod_resources_socket):
            if sockets.is_socket(path):
                path.unlink()

    def restart(self) -> None:
        """Stop, forget endpoints and device lists (allocations are checkpointed), start again."""
        self.stop()
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
            stub = dp_grpc.DevicePluginStub(channel)
            # Upstream dials with a 10 s blocking deadline, then asks for the options.
            options = stub.GetDevicePluginOptions(dp.Empty(), wait_for_ready=True, timeout=self.dial_timeout)
        except grpc.RpcError as exc:
            channel.close()
            raise RegistrationError(
                f"failed to connect to the device plugin at {socket} within {self.dial_timeout} s "
                f"({exc.code().name}: {exc.details()}); is it serving there?"
            ) from exc
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
            client = _PluginClient(request.resource_name, socket, channel, stub, endpoint.generation, options)
            previous = self._clients.get(request.resource_name)
            self._clients[request.resource_name] = client
            self.registrations += 1
            self._changed.notify_all()
        if previous is not None:
            previous.closing = True
            previous.channel.close()
        client.thread = threading.Thread(
            target=self._list_and_watch, args=(client,), name=f"listandwatch-{client.resource}", daemon=True
        )
        client.thread.start()

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
            # ValueError: the channel was closed under the stream (restart, replacement).
            reason = f"stream broke: {exc}"
        log.info("ListAndWatch of %s: %s", client.resource, reason)
        with self._lock:
            if self.device_manager.stream_broken(client.resource, client.generation, now=self.clock()):
                self._changed.notify_all()
            if self._clients.get(client.resource) is client:
                del self._clients[client.resource]
        if not client.closing:
            client.channel.close()

    # -- pods ----------------------------------------------------------------------------------------

    def allocate(self, pod: PodRef, container: str, resource: str, count: int) -> dp.ContainerAllocateResponse:
        """Admit one container's request for ``count`` devices of ``resource`` (raises AllocationError)."""
        with self._admission:
            with self._lock:
                dm = self.device_manager
                held = dm.pod_devices(pod).get(container, {}).get(resource)
                ids = dm.devices_to_allocate(pod, container, resource, count)
                client = self._clients.get(resource)
                if held is not None or count == 0:
                    self._note_container(pod, container)
                    return dp.ContainerAllocateResponse()
                if client is None:
                    raise AllocationError(f"no plugin connected for {resource}")
                available = sorted(set(dm.healthy_ids(resource)) - dm.allocated_ids(resource), key=natural_key)
            if client.options.get_preferred_allocation_available:
                preferred = self._preferred(client, available, count)
                with self._lock:
                    ids = self.device_manager.devices_to_allocate(pod, container, resource, count, preferred)
            request = dp.AllocateRequest(container_requests=[dp.ContainerAllocateRequest(devices_ids=ids)])
            response = _plugin_call(f"Allocate of {resource} devices {ids}", client.stub.Allocate, request)
            if len(response.container_responses) != 1:
                raise AllocationError(
                    f"plugin for {resource} answered {len(response.container_responses)} "
                    "container responses to a request for 1"
                )
            with self._lock:
                self.device_manager.record_allocation(pod, container, resource, ids)
                self._note_container(pod, container)
                self._changed.notify_all()
            return response.container_responses[0]

    def _preferred(self, client: _PluginClient, available: list[str], count: int) -> list[str] | None:
        request = dp.PreferredAllocationRequest(
            container_requests=[
                dp.ContainerPreferredAllocationRequest(available_deviceIDs=available, allocation_size=count)
            ]
        )
        # The kubelet treats a failing preference as an admission error too.
        what = f"GetPreferredAllocation for {client.resource}"
        response = _plugin_call(what, client.stub.GetPreferredAllocation, request)
        if not response.container_responses:
            return None
        return list(response.container_responses[0].deviceIDs)

    def _note_container(self, pod: PodRef, container: str) -> None:
        self.device_manager.add_pod(pod)
        names = self._containers.setdefault(pod.key, [])
        if container not in names:
            names.append(container)

    def add_pod(self, pod: PodRef, containers: list[str] | tuple[str, ...] = ()) -> None:
        """A pod that holds no device-plugin devices (e.g. a Kata pod charged through overhead)."""
        with self._lock:
            for name in containers or ("main",):
                self._note_container(pod, name)
            self._changed.notify_all()

    def finish_pod(self, pod: PodRef) -> None:
        """The pod terminated; its devices are released at the next admission (never told to plugins)."""
        with self._lock:
            self.device_manager.finish_pod(pod)
            self._changed.notify_all()

    def _pod_resources(self, pod: PodRef) -> pr.PodResources:
        devices = self.device_manager.pod_devices(pod)
        containers = []
        for name in self._containers.get(pod.key, []):
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
                self._changed.wait(left)
            return True
