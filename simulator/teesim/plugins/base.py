"""What every teesim device plugin shares: the ``v1beta1.DevicePlugin`` service over the plugin's own
Unix socket, registration with the kubelet, and re-registration when the kubelet restarts.

A real plugin learns of a kubelet restart because the kubelet deletes every socket in the
device-plugins directory and creates a new ``kubelet.sock``; real plugins watch that with inotify.
Here the watcher compares the ``kubelet.sock`` inode (and checks the plugin's own socket) every
``watch_interval`` seconds, then serves a fresh socket and registers again.

The kubelet can also drop a plugin's stream without restarting: when a plugin registers again
while its previous stream is still open, the old stream's end disconnects the new registration
(upstream's ``runClient``). The service notices the kubelet cancelling its ``ListAndWatch`` and the
watcher then registers again *on the same socket*, without re-serving (re-serving would end the
current stream and start the same race over).

Every ``Allocate`` the kubelet makes is passed to ``on_allocate``: the kubelet decides which devices a
pod gets before the plugin's next poll can see it in pod-resources, and a plugin that marks devices
Unhealthy must know them at once.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent import futures
from pathlib import Path

import grpc

from teesim._args import seconds
from teesim._collection import KUBEVIRT_TDX
from teesim.kubelet import sockets
from teesim.kubelet.devicemanager import API_VERSION, Device
from teesim.kubelet.generated.deviceplugin.v1beta1 import api_pb2 as dp
from teesim.kubelet.generated.deviceplugin.v1beta1 import api_pb2_grpc as dp_grpc

log = logging.getLogger(__name__)
REGISTER_TIMEOUT = 15.0  # the kubelet dials back within Register; allow for its 10 s dial timeout


# Transport trouble (no kubelet yet, kubelet restarting) is retried; any other answer is the kubelet's
# verdict on the request itself.
_RETRYABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED})


class RegistrationRejected(RuntimeError):
    """The kubelet refused the registration; like upstream plugins, the process then exits."""


class DevicePluginService(dp_grpc.DevicePluginServicer):
    """The plugin's gRPC service: a device list that streams to the kubelet on every change."""

    def __init__(
        self,
        resource_name: str,
        options: dp.DevicePluginOptions | None = None,
        on_allocate: Callable[[list[str]], None] | None = None,
    ):
        self.resource_name = resource_name
        self.options = options or dp.DevicePluginOptions()
        self.on_allocate = on_allocate
        self._devices: tuple[Device, ...] = ()
        self._version = 0
        # Bumped by close(): a stream opened in an earlier epoch ends, even if the plugin re-serves
        # before that stream's thread wakes up.
        self._epoch = 0
        self._cond = threading.Condition()
        self.allocations: list[list[str]] = []
        self.pre_starts: list[list[str]] = []
        # Set when the kubelet (not the plugin) ended a ListAndWatch stream.
        self.stream_lost = threading.Event()

    @property
    def devices(self) -> tuple[Device, ...]:
        with self._cond:
            return self._devices

    def set_devices(self, devices: Sequence[Device]) -> bool:
        """Publish a new device list; True (and a ListAndWatch message) only when it changed."""
        new = tuple(devices)
        with self._cond:
            if new == self._devices and self._version:
                return False
            self._devices = new
            self._version += 1
            self._cond.notify_all()
            return True

    def close(self) -> None:
        """End every open ListAndWatch stream (the plugin is going away or re-serving)."""
        with self._cond:
            self._epoch += 1
            self._cond.notify_all()

    def GetDevicePluginOptions(self, request, context):
        return self.options

    def ListAndWatch(self, request, context):
        closing = False

        def ended() -> None:
            # gRPC stops pulling a stream's generator once the client cancels: cancelled while this generator
            # sat at its ``yield``, it never runs again, so the end is noticed here too (unless we closed it).
            with self._cond:
                if not closing and self._epoch == epoch:
                    self.stream_lost.set()
                self._cond.notify_all()

        sent = -1
        with self._cond:
            epoch = self._epoch
        context.add_callback(ended)
        while True:
            with self._cond:
                while self._version == sent and self._epoch == epoch and context.is_active():
                    self._cond.wait(1.0)
                if self._epoch != epoch:
                    closing = True
                    return
                if not context.is_active():
                    self.stream_lost.set()
                    return
                sent = self._version
                devices = self._devices
            yield dp.ListAndWatchResponse(devices=[dp.Device(ID=d.id, health=d.health) for d in devices])

    def GetPreferredAllocation(self, request, context):
        responses = []
        for req in request.container_requests:
            chosen = list(req.must_include_deviceIDs)
            for device_id in req.available_deviceIDs:
                if len(chosen) >= req.allocation_size:
                    break
                if device_id not in chosen:
                    chosen.append(device_id)
            responses.append(dp.ContainerPreferredAllocationResponse(deviceIDs=chosen))
        return dp.PreferredAllocationResponse(container_responses=responses)

    def Allocate(self, request, context):
        known = {d.id for d in self.devices}
        responses = []
        for req in request.container_requests:
            unknown = [i for i in req.devices_ids if i not in known]
            if unknown:
                context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"{self.resource_name}: unknown device IDs {unknown}; this plugin has {len(known)} devices",
                )
            self.allocations.append(list(req.devices_ids))
            if self.on_allocate is not None:
                self.on_allocate(list(req.devices_ids))
            # A simulated key has no device node to pass in; the environment names what was given.
            env_name = "TEESIM_" + self.resource_name.rpartition("/")[2].upper().replace("-", "_") + "_DEVICES"
            responses.append(dp.ContainerAllocateResponse(envs={env_name: ",".join(req.devices_ids)}))
        return dp.AllocateResponse(container_responses=responses)

    def PreStartContainer(self, request, context):
        self.pre_starts.append(list(request.devices_ids))
        return dp.PreStartContainerResponse()


class PluginServer:
    """Serves a :class:`DevicePluginService` on ``<device-plugins>/<socket_name>`` and keeps it
    registered with the kubelet across kubelet restarts."""

    def __init__(self, service: DevicePluginService, kubelet_dir: str | os.PathLike[str], socket_name: str):
        if "/" in socket_name:
            raise ValueError(f"socket name {socket_name!r} must be a plain file name inside the device-plugins dir")
        self.service = service
        self.plugin_dir = sockets.device_plugin_dir(kubelet_dir)
        self.socket_name = socket_name
        self.socket = self.plugin_dir / socket_name
        self.kubelet_socket = sockets.registration_socket(kubelet_dir)
        sockets.check_socket_path(self.socket)
        self._server: grpc.Server | None = None
        self._kubelet_identity: tuple[int, int, int] | None = None
        self.registrations = 0

    def serve(self) -> None:
        """(Re)create the plugin's socket and start serving on it."""
        self.shutdown()
        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        if os.path.lexists(self.socket):
            os.unlink(self.socket)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="plugin"))
        dp_grpc.add_DevicePluginServicer_to_server(self.service, server)
        if not server.add_insecure_port(sockets.socket_target(self.socket)):
            raise OSError(f"cannot listen on {self.socket}")
        server.start()
        self._server = server

    def shutdown(self) -> None:
        self.service.close()
        if self._server is not None:
            self._server.stop(grace=None).wait(5)
            self._server = None

    def register(self) -> None:
        """Register with the kubelet: grpc.RpcError when it cannot be reached, RegistrationRejected
        when it answers no."""
        identity = sockets.socket_identity(self.kubelet_socket)
        channel = sockets.channel(self.kubelet_socket)
        try:
            dp_grpc.RegistrationStub(channel).Register(
                dp.RegisterRequest(
                    version=API_VERSION,
                    endpoint=self.socket_name,
                    resource_name=self.service.resource_name,
                    options=self.service.options,
                ),
                wait_for_ready=True,
                timeout=REGISTER_TIMEOUT,
            )
        except grpc.RpcError as exc:
            if exc.code() in _RETRYABLE:
                raise
            raise RegistrationRejected(
                f"the kubelet at {self.kubelet_socket} rejected {self.service.resource_name}: {exc.details()}"
            ) from exc
        finally:
            channel.close()
        self._kubelet_identity = identity
        self.registrations += 1
        log.info("registered %s at %s", self.service.resource_name, self.socket)

    def needs_registration(self) -> bool:
        """True after a kubelet restart: a new kubelet.sock, or our own socket deleted."""
        identity = sockets.socket_identity(self.kubelet_socket)
        if identity is None:
            return False  # no kubelet yet; wait for one
        return identity != self._kubelet_identity or not sockets.is_socket(self.socket)

    def stream_dropped(self) -> bool:
        """True when the same kubelet cancelled our ListAndWatch stream: register again, same socket."""
        return self.service.stream_lost.is_set() and sockets.socket_identity(self.kubelet_socket) is not None

    def attention_needed(self) -> bool:
        """Whether :meth:`keep_registered` has something to do now (a few µs: two ``stat`` calls)."""
        return self.needs_registration() or self.stream_dropped()

    def keep_registered(
        self, stop: threading.Event, watch_interval: float = 0.05, wake: threading.Event | None = None
    ) -> None:
        """Loop until ``stop``: re-serve and re-register whenever the kubelet asks for it. Checks every
        ``watch_interval`` seconds, and at once when ``wake`` is set (by a thread that noticed)."""
        while not stop.is_set():
            try:
                if self.needs_registration():
                    self.service.stream_lost.clear()
                    self.serve()
                    self.register()
                elif self.stream_dropped():
                    log.warning(
                        "the kubelet dropped the ListAndWatch stream of %s; registering again",
                        self.service.resource_name,
                    )
                    self.service.stream_lost.clear()
                    self.register()
            except (grpc.RpcError, OSError) as exc:
                log.warning("registration with %s failed, will retry: %s", self.kubelet_socket, exc)
                self._kubelet_identity = None
            except RegistrationRejected:
                if sockets.is_socket(self.socket):
                    raise
                # A stream that drops because the kubelet stops is re-registered at once on the same socket, and
                # the Register call waits for the kubelet's socket: the restarted kubelet removes every socket in
                # its device-plugins directory when it starts (kubernetes v1.37.2
                # pkg/kubelet/cm/devicemanager/plugin/v1beta1/server.go Start), ours too, and then cannot dial it.
                # Serve again and register (found on the real kubelet of tests/node).
                log.warning("the restarted kubelet removed %s; serving it again", self.socket)
                self._kubelet_identity = None
            if wake is None:
                stop.wait(watch_interval)
            else:
                wake.wait(watch_interval)
                wake.clear()


def common_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host-root", required=True, help="node root holding sys/fs/cgroup and var/lib/kubelet")
    parser.add_argument("--resource-name", default=KUBEVIRT_TDX, help="extended resource to advertise")
    parser.add_argument("--misc-resource", default="tdx", help="misc cgroup resource: tdx, sev, sev_es (snp)")
    parser.add_argument("--kubelet-dir", help="kubelet directory (default: HOST_ROOT/var/lib/kubelet)")
    parser.add_argument("--socket-name", help="plugin socket file name (default: teesim-<misc-resource>.sock)")
    parser.add_argument("--poll-interval", type=seconds(3600.0), default=1.0, help="seconds between misc cgroup reads")
    parser.add_argument(
        "--watch-interval", type=seconds(3600.0), default=0.05, help="seconds between kubelet.sock checks"
    )
    parser.add_argument("--log-level", default="WARNING")
    parser.add_argument(
        "--stats-file",
        help="write the process's CPU time and poll counters as JSON to this file on SIGUSR1 and at exit",
    )


def process_stats(counters: dict[str, int] | None = None) -> dict[str, float | int]:
    """This process's CPU time (every thread: ``getrusage(RUSAGE_SELF)``), the monotonic clock it was
    read at, and the plugin's counters."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "pid": os.getpid(),
        "monotonic": time.monotonic(),
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "user_s": usage.ru_utime,
        "system_s": usage.ru_stime,
        "threads": threading.active_count(),
        **(counters or {}),
    }


def write_stats(path: str, counters: Callable[[], dict[str, int]] | None) -> None:
    """Replace ``path`` with the current stats (write and rename: a reader never sees half a file)."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(process_stats(counters() if counters else None), handle)
    os.replace(tmp, path)


# A stopping plugin notices within this long; sleeping in slices costs nothing at short intervals.
_SLEEP_SLICE = 1.0


def poll_loop(poll: Callable[[], None], interval: float, stop: threading.Event) -> None:
    """``poll()`` every ``interval`` seconds on a fixed grid (a slow poll does not shift the later
    ones; one that overruns a whole interval starts the grid again from now).

    It sleeps with ``time.sleep``: a wake-up costs about half of an ``Event.wait`` with a timeout,
    and at 20 polls a second the wake-ups are most of the plugin's CPU time."""
    next_at = time.monotonic()
    while not stop.is_set():
        poll()
        next_at += interval
        now = time.monotonic()
        if next_at < now:
            next_at = now
        while now < next_at and not stop.is_set():
            time.sleep(min(next_at - now, _SLEEP_SLICE))
            now = time.monotonic()


def run_plugin(
    args: argparse.Namespace,
    service: DevicePluginService,
    poll: Callable[[], None] | None,
    stats: Callable[[], dict[str, int]] | None = None,
) -> int:
    """Serve ``service`` until SIGTERM/SIGINT; ``poll`` runs every ``--poll-interval`` seconds."""
    kubelet_dir = Path(args.kubelet_dir or sockets.kubelet_dir(args.host_root))
    server = PluginServer(service, kubelet_dir, args.socket_name or f"teesim-{args.misc_resource}.sock")
    stop = threading.Event()
    # With a poll loop, the poll thread also looks at the kubelet's socket (after each poll) and wakes
    # the main thread when it must register again: one thread waking up instead of two.
    wake = threading.Event() if poll is not None else None

    def stop_now(*_: object) -> None:
        stop.set()
        if wake is not None:
            wake.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, stop_now)
    stats_file = getattr(args, "stats_file", None)
    if stats_file:
        signal.signal(signal.SIGUSR1, lambda *_: write_stats(stats_file, stats))
    poller = None
    if poll is not None and wake is not None:

        def poll_and_watch() -> None:
            poll()
            if server.attention_needed():
                wake.set()

        poller = threading.Thread(
            target=poll_loop, args=(poll_and_watch, args.poll_interval, stop), name="poll", daemon=True
        )
        poller.start()
    watch_interval = args.watch_interval if wake is None else max(args.watch_interval, _SLEEP_SLICE)
    try:
        server.keep_registered(stop, watch_interval, wake)
    except RegistrationRejected as exc:
        return fail(str(exc))
    finally:
        stop.set()
        server.shutdown()
        if os.path.lexists(server.socket):
            os.unlink(server.socket)
        if poller is not None:
            poller.join(timeout=5)
        if stats_file:
            write_stats(stats_file, stats)
    return 0


def fail(message: str) -> int:
    print(f"teesim plugin: error: {message}", file=sys.stderr)
    return 2
