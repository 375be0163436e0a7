"""The reconciling device plugin (proposal 2), as a real gRPC plugin process.

Every ``--poll-interval`` seconds (the kernel sends no notification for misc usage) it reads
``misc.capacity`` and ``misc.current`` through the collection's parser, learns which of its devices
are allocated, and advertises ``current - own`` free devices as Unhealthy
(:func:`teesim.plugins.reconcile.next_unhealthy`).

Its own allocations come from the kubelet's pod-resources ``List`` plus every ``Allocate`` the
kubelet made since that ``List`` (so a device handed out between two polls is never published
Unhealthy). ``List`` is rate-limited by the kubelet for every client of the node together (100 QPS,
burst 10): the plugin calls it at most every ``--min-list-interval`` seconds (default 0.1 s, a tenth
of the node's budget) whatever the poll interval, and when the kubelet refuses a call
(``ResourceExhausted: rejected by rate limit``) it keeps the last device list and logs a warning
saying so, with the count. When ``misc.current`` cannot be read it keeps the previous verdict; when
the kubelet cannot be asked at all (it is restarting) it skips the poll, because without its own
allocations every key would look foreign.

    python -m teesim.plugins.reconciling --host-root DIR --resource-name devices.kubevirt.io/tdx \\
        --misc-resource tdx --poll-interval 0.1
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import grpc

from teesim._collection import canonical_resource, read_misc_state
from teesim.kubelet import sockets
from teesim.kubelet.devicemanager import HEALTHY, UNHEALTHY, Device
from teesim.kubelet.generated.podresources.v1 import api_pb2 as pr
from teesim.kubelet.generated.podresources.v1 import api_pb2_grpc as pr_grpc
from teesim.plugins.base import DevicePluginService, common_arguments, run_plugin
from teesim.plugins.reconcile import capacity_from_misc, device_ids, next_unhealthy

log = logging.getLogger(__name__)
LIST_TIMEOUT = 2.0
DEFAULT_MIN_LIST_INTERVAL = 0.1
# An Allocate the kubelet made is trusted until a List shows it, or for this long: the kubelet records
# the devices right after the plugin answers, and a pod whose admission failed after its Allocate
# frees them again.
PENDING_ALLOCATION_TTL = 5.0


def own_allocated_ids(response: pr.ListPodResourcesResponse, resource_name: str) -> set[str]:
    """Device IDs of ``resource_name`` held by any container in a pod-resources List answer."""
    return {
        device_id
        for pod in response.pod_resources
        for container in pod.containers
        for devices in container.devices
        if devices.resource_name == resource_name
        for device_id in devices.device_ids
    }


class Reconciler:
    """One poll = read the kernel, know the own allocations, publish the device list."""

    def __init__(
        self,
        service: DevicePluginService,
        host_root: str,
        misc_resource: str,
        kubelet_dir: Path,
        *,
        min_list_interval: float = DEFAULT_MIN_LIST_INTERVAL,
        reserve: int = 0,
    ):
        self.service = service
        self.host_root = host_root
        self.misc_resource = misc_resource
        self.pod_resources_socket = sockets.pod_resources_socket(kubelet_dir)
        self.min_list_interval = min_list_interval
        self.reserve = reserve
        self._channel: grpc.Channel | None = None
        self._unhealthy: frozenset[str] = frozenset()
        self._ids: tuple[str, ...] = ()
        self._current: int | None = None
        self._listed: set[str] | None = None
        self._listed_at = float("-inf")  # when List was last tried (answered or refused)
        self._list_failed = False
        # Device IDs from Allocate calls not yet seen in a List answer -> when they were allocated.
        self._pending: dict[str, float] = {}
        self._lock = threading.Lock()
        self.polls = 0
        self.skipped = 0
        self.throttled = 0
        self.lists = 0
        service.on_allocate = self.on_allocate

    # -- inputs ----------------------------------------------------------------------------------

    def _list(self) -> pr.ListPodResourcesResponse:
        if self._channel is None:
            self._channel = sockets.channel(self.pod_resources_socket)
        try:
            return pr_grpc.PodResourcesListerStub(self._channel).List(
                pr.ListPodResourcesRequest(), wait_for_ready=True, timeout=LIST_TIMEOUT
            )
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                # A restarted kubelet is a new socket: dial again next time.
                self._channel.close()
                self._channel = None
            raise

    def read_kernel(self) -> tuple[int | None, int | None]:
        """(capacity, current) of the resource; None where the files cannot tell."""
        state = read_misc_state(self.host_root)
        if not state.layout.present:
            return None, None
        resource = state.resource(self.misc_resource)
        if resource is None:
            return capacity_from_misc({}, self.misc_resource), 0
        return resource.capacity, resource.current

    def _refresh_own(self) -> bool:
        """Call ``List`` when the last answer is older than ``min_list_interval``; False when the
        kubelet could not be asked and nothing is known yet or the kubelet refused."""
        now = time.monotonic()
        if now - self._listed_at < self.min_list_interval:
            # Answered (or refused) a moment ago: use that answer, do not hammer the shared budget.
            return self._listed is not None and not self._list_failed
        self._listed_at = now
        self._list_failed = False
        try:
            listed = own_allocated_ids(self._list(), self.service.resource_name)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                self.throttled += 1
                self._list_failed = True
                log.warning(
                    "the kubelet refused pod-resources List (%s): its 100 calls per second are shared by every "
                    "client on the node; keeping the last device list (%d refusals so far)",
                    exc.details(),
                    self.throttled,
                )
            else:
                self.skipped += 1
                self._list_failed = True
                log.info("pod-resources List unavailable, keeping the last device list: %s", exc.details())
            return False
        except (ValueError, OSError) as exc:
            self.skipped += 1
            self._list_failed = True
            log.info("pod-resources List unavailable, keeping the last device list: %s", exc)
            return False
        self.lists += 1
        self._listed = listed
        self._pending = {i: t for i, t in self._pending.items() if i not in listed and now - t < PENDING_ALLOCATION_TTL}
        return True

    def own(self) -> set[str]:
        return set(self._listed or ()) | set(self._pending)

    def accounted_elsewhere(self) -> int:
        """Keys the scheduler already counts for pods holding no device of ours (none here)."""
        return 0

    # -- decision --------------------------------------------------------------------------------

    def _publish(self) -> None:
        self._unhealthy = next_unhealthy(
            self._ids,
            self.own(),
            self._current,
            self._unhealthy,
            accounted_elsewhere=self.accounted_elsewhere(),
            reserve=self.reserve,
        )
        self.service.set_devices([Device(i, UNHEALTHY if i in self._unhealthy else HEALTHY) for i in self._ids])

    def poll(self) -> None:
        with self._lock:
            self.polls += 1
            capacity, current = self.read_kernel()
            if capacity is not None:
                self._ids = device_ids(self.misc_resource, capacity)
            self._current = current
            if not self._refresh_own():
                return
            self._publish()

    def on_allocate(self, ids: list[str]) -> None:
        """The kubelet gave ``ids`` to a container: they are ours from now on, republish if needed."""
        with self._lock:
            now = time.monotonic()
            self._pending.update(dict.fromkeys(ids, now))
            if self._listed is not None and self._unhealthy & set(ids):
                self._publish()

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()


def add_reconciler_arguments(parser: argparse.ArgumentParser) -> None:
    common_arguments(parser)
    parser.add_argument(
        "--min-list-interval",
        type=float,
        default=DEFAULT_MIN_LIST_INTERVAL,
        help="seconds between pod-resources List calls (the kubelet allows 100 per second per node)",
    )


def serve_reconciler(args: argparse.Namespace, make: type[Reconciler], **extra) -> int:
    """Run a reconciler class as a plugin process until SIGTERM."""
    logging.basicConfig(level=args.log_level.upper(), format=f"%(asctime)s {make.__name__} %(levelname)s %(message)s")
    args.misc_resource = canonical_resource(args.misc_resource)
    kubelet_dir = Path(args.kubelet_dir or sockets.kubelet_dir(args.host_root))
    service = DevicePluginService(args.resource_name)
    reconciler = make(
        service,
        os.fspath(args.host_root),
        args.misc_resource,
        kubelet_dir,
        min_list_interval=args.min_list_interval,
        **extra,
    )
    # Publish the kernel's view before the first registration, so the first ListAndWatch answer is real.
    capacity, _ = reconciler.read_kernel()
    service.set_devices([Device(i) for i in device_ids(args.misc_resource, capacity or 0)])
    try:
        return run_plugin(args, service, poll=reconciler.poll)
    finally:
        reconciler.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m teesim.plugins.reconciling", description=__doc__.splitlines()[0])
    add_reconciler_arguments(parser)
    args = parser.parse_args(argv)
    return serve_reconciler(args, Reconciler)


if __name__ == "__main__":
    sys.exit(main())
