"""The reconciling device plugin (proposal 2), as a real gRPC plugin process.

Every ``--poll-interval`` seconds (the kernel sends no notification for misc usage) it reads
``misc.capacity`` and ``misc.current`` through the collection's parser, learns which of its devices
are allocated, and advertises ``current - own`` free devices as Unhealthy
(:func:`teesim.plugins.reconcile.next_unhealthy`).

Its own allocations come from the kubelet's pod-resources ``List`` plus every ``Allocate`` the
kubelet made since that ``List`` (so a device handed out between two polls is never published
Unhealthy). With ``--pods-url`` (the node's pods, as the kubelet's ``/pods`` or an informer list them)
an own device counts as charged only while the pod holding it has started its guest
(:func:`teesim.plugins.reconcile.own_charged`): a VMI admitted but not started, or one whose launch
failed, holds a device and no key. Without it every own device is assumed charged, and each such VMI
leaves one phantom slot the scheduler can fill (issue 19).

``List`` is rate-limited by the kubelet for every client of the node together (100 QPS, burst 10):
the plugin calls it at most every ``--min-list-interval`` seconds (default 0.1 s, a tenth of the node's
budget) whatever the poll interval, and when the kubelet refuses a call
(``ResourceExhausted: rejected by rate limit``) it keeps the last device list and logs a warning
saying so, with the count. When ``misc.current`` cannot be read it keeps the previous verdict; when
the kubelet cannot be asked at all (it is restarting) it skips the poll, because without its own
allocations every key would look foreign.

A poll is cheap when nothing changed, which is almost always: the kernel never notifies a change of
``misc.current`` (polling is the only way), but reading it from a file descriptor held open costs
about 2 µs, so a poll reads those bytes first and stops there when they are the bytes of the last
published decision, no ``Allocate`` came in since and the last ``List`` is younger than
``--list-refresh`` (default 1 s: what a pod that ends without ever charging a key frees is seen
within that). Only a change reads the misc files through the collection's parser, asks the kubelet
and publishes. Old kernels without a root ``misc.current`` take the full path every poll.

    python -m teesim.plugins.reconciling --host-root DIR --resource-name devices.kubevirt.io/tdx \\
        --misc-resource tdx --poll-interval 0.1
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

import grpc

from teesim._args import seconds
from teesim._collection import HostReader, canonical_resource, parse_misc_text, read_misc_state
from teesim.kubelet import sockets
from teesim.kubelet.devicemanager import HEALTHY, UNHEALTHY, Device
from teesim.kubelet.generated.podresources.v1 import api_pb2 as pr
from teesim.kubelet.generated.podresources.v1 import api_pb2_grpc as pr_grpc
from teesim.plugins.base import DevicePluginService, common_arguments, run_plugin
from teesim.plugins.reconcile import (
    capacity_from_misc,
    device_ids,
    next_unhealthy,
    own_charged,
    pod_key,
    started_pods,
)

log = logging.getLogger(__name__)
LIST_TIMEOUT = 2.0
DEFAULT_MIN_LIST_INTERVAL = 0.1
DEFAULT_LIST_REFRESH = 1.0
# An Allocate the kubelet made is trusted until a List shows it, or for this long: the kubelet records
# the devices right after the plugin answers, and a pod whose admission failed after its Allocate
# frees them again.
PENDING_ALLOCATION_TTL = 5.0
PODS_TIMEOUT = 2.0


def own_allocated_ids(response: pr.ListPodResourcesResponse, resource_name: str) -> set[str]:
    """Device IDs of ``resource_name`` held by any container in a pod-resources List answer."""
    return set(own_holders(response, resource_name))


def own_holders(response: pr.ListPodResourcesResponse, resource_name: str) -> dict[str, str]:
    """Device ID of ``resource_name`` -> ``namespace/name`` of the pod holding it, from a List answer."""
    return {
        device_id: pod_key(pod.namespace, pod.name)
        for pod in response.pod_resources
        for container in pod.containers
        for devices in container.devices
        if devices.resource_name == resource_name
        for device_id in devices.device_ids
    }


class HeldFile:
    """A file read again and again through one open descriptor (``pread`` at offset 0: on cgroupfs a
    fresh rendering every time). The descriptor is reopened when the path names another file (a
    node tree written by atomic rename, as the simulator's is) or a read fails."""

    def __init__(self, path: str | None = None):
        self.path = path
        self._fd: int | None = None
        self._identity: tuple[int, int] | None = None

    def read(self) -> bytes | None:
        """The file's bytes, or None when it cannot be read now."""
        if self.path is None:
            return None
        try:
            st = os.stat(self.path)
            if self._fd is None or (st.st_dev, st.st_ino) != self._identity:
                self.close()
                self._fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
                self._identity = (st.st_dev, st.st_ino)
            return os.pread(self._fd, 65536, 0)
        except OSError:
            self.close()
            return None

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class Reconciler:
    """One poll = read the kernel, know the own allocations, publish the device list; a poll that
    finds the kernel's bytes unchanged (and nothing else due) ends after that read."""

    def __init__(
        self,
        service: DevicePluginService,
        host: HostReader,
        misc_resource: str,
        kubelet_dir: Path,
        *,
        min_list_interval: float = DEFAULT_MIN_LIST_INTERVAL,
        reserve: int = 0,
        list_refresh: float = DEFAULT_LIST_REFRESH,
        pods_url: str | None = None,
    ):
        self.service = service
        self.host = host
        self.misc_resource = misc_resource
        self.pod_resources_socket = sockets.pod_resources_socket(kubelet_dir)
        self.min_list_interval = min_list_interval
        self.list_refresh = list_refresh
        self.reserve = reserve
        self.pods_url = pods_url
        self.pod_list_failures = 0
        # namespace/name of the pods whose guest started, from the last pod list (with pods_url).
        self._started: frozenset[str] = frozenset()
        self._holders: dict[str, str] = {}
        # The root misc.current (found by the first full read); its bytes at the last publish.
        self._current_file = HeldFile()
        self._published_bytes: bytes | None = None
        self._allocated_since = False
        self._channel: grpc.Channel | None = None
        self._stub: pr_grpc.PodResourcesListerStub | None = None
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
        self.quiet_polls = 0
        self.publishes = 0
        self.skipped = 0
        self.throttled = 0
        self.lists = 0
        service.on_allocate = self.on_allocate

    # -- inputs ----------------------------------------------------------------------------------

    def _list(self) -> pr.ListPodResourcesResponse:
        if self._channel is None:
            self._channel = sockets.channel(self.pod_resources_socket)
            self._stub = pr_grpc.PodResourcesListerStub(self._channel)
        try:
            return self._stub.List(pr.ListPodResourcesRequest(), wait_for_ready=True, timeout=LIST_TIMEOUT)
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                # A restarted kubelet is a new socket: dial again next time.
                self._channel.close()
                self._channel = None
            raise

    def read_kernel(self) -> tuple[int | None, int | None]:
        """(capacity, current) of the resource; None where the files cannot tell."""
        # Afresh each pass: the host's problem list must not grow with the polls.
        state = read_misc_state(self.host.fresh())
        if not state.layout.present:
            return None, None
        # Held for the quiet polls; None on kernels without a root misc.current (they sum children).
        root_current = os.path.join(state.layout.directory, "misc.current") if state.layout.directory else None
        if root_current != self._current_file.path:
            self._current_file.close()
            self._current_file = HeldFile(root_current if root_current and os.path.exists(root_current) else None)
        resource = state.resource(self.misc_resource)
        if resource is None:
            return capacity_from_misc({}, self.misc_resource), 0
        return resource.capacity, resource.current

    def _fetch_pods(self) -> list[Mapping[str, object]] | None:
        """The node's pods from ``pods_url``; None (counted, logged) when they cannot be had now."""
        try:
            with urllib.request.urlopen(self.pods_url, timeout=PODS_TIMEOUT) as answer:
                document = json.load(answer)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            self.pod_list_failures += 1
            log.info("pod list at %s unavailable, keeping the last device list: %s", self.pods_url, exc)
            return None
        items = document.get("items") if isinstance(document, dict) else None
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            self.pod_list_failures += 1
            log.warning("%s did not answer a PodList; keeping the last device list", self.pods_url)
            return None
        return items

    def _refresh_pods(self) -> bool:
        """Read the pod list when there is one to read; False when it could not be read."""
        if self.pods_url is None:
            return True
        pods = self._fetch_pods()
        if pods is None:
            return False
        self._take_pods(pods)
        return True

    def _take_pods(self, pods: list[Mapping[str, object]]) -> None:
        self._started = started_pods(pods)

    def own_charged(self) -> int | None:
        """Own devices the kernel charges; None (all assumed charged) without a pod list."""
        if self.pods_url is None:
            return None
        return own_charged(self._holders, self.own(), self._started)

    def _refresh_own(self) -> bool:
        if not self._refresh_pods():
            return False
        return self._list_own()

    def _list_own(self) -> bool:
        """Call ``List`` when the last answer is older than ``min_list_interval``; False when the
        kubelet could not be asked and nothing is known yet or the kubelet refused."""
        now = time.monotonic()
        if now - self._listed_at < self.min_list_interval:
            # Answered (or refused) a moment ago: use that answer, do not hammer the shared budget.
            return self._listed is not None and not self._list_failed
        self._listed_at = now
        self._list_failed = False
        try:
            holders = own_holders(self._list(), self.service.resource_name)
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
        listed = set(holders)
        self._listed, self._holders = listed, holders
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
            own_charged=self.own_charged(),
        )
        if self.service.set_devices([Device(i, UNHEALTHY if i in self._unhealthy else HEALTHY) for i in self._ids]):
            self.publishes += 1

    def poll(self) -> None:
        with self._lock:
            self.polls += 1
            before = self._current_file.read()
            same_kernel = before is not None and before == self._published_bytes
            # An Allocate not yet in a List has no known pod, so it counts as not charged (hiding one
            # key more): List again (within min_list_interval) until it shows the holder.
            quiet = not self._allocated_since and not (self.pods_url and self._pending)
            if same_kernel and quiet and time.monotonic() - self._listed_at < self.list_refresh:
                self.quiet_polls += 1
                return
            if not same_kernel:
                # The kernel changed (or cannot be read cheaply): read it the way the collection does.
                capacity, current = self.read_kernel()
                if capacity is not None:
                    self._ids = device_ids(self.misc_resource, capacity)
                self._current = self._current_in(before) if before is not None and current is not None else current
            self._published_bytes = None
            if not self._refresh_own():
                return
            self._allocated_since = False
            self._publish()
            # What was decided from: a change after ``before`` was read differs from it next poll.
            self._published_bytes = before if self._current is not None else None

    def _current_in(self, data: bytes) -> int | None:
        """The usage ``data`` (the root ``misc.current`` bytes this poll read first) shows: the decision
        is filed under those bytes, so it must be made from them. The file can move between two reads
        and come back (a guest started, stopped, started again): a decision from the second read, filed
        under the first read's bytes, would stand as long as the file shows them, the key never hidden."""
        path = self._current_file.path or "misc.current"
        parsed = parse_misc_text(data, path, signed=True)
        if any(issue.line_number is None for issue in parsed.issues):
            return None  # torn or unreadable as a whole: no usage known
        return parsed.values.get(self.misc_resource, 0)

    def stats(self) -> dict[str, int]:
        return {
            "polls": self.polls,
            "quiet_polls": self.quiet_polls,
            "lists": self.lists,
            "publishes": self.publishes,
            "throttled": self.throttled,
            "skipped": self.skipped,
        }

    def on_allocate(self, ids: list[str]) -> None:
        """The kubelet gave ``ids`` to a container: they are ours from now on, republish if needed."""
        with self._lock:
            now = time.monotonic()
            self._pending.update(dict.fromkeys(ids, now))
            self._allocated_since = True
            if self._listed is not None and self._unhealthy & set(ids):
                self._publish()

    def close(self) -> None:
        self._current_file.close()
        if self._channel is not None:
            self._channel.close()


def add_reconciler_arguments(parser: argparse.ArgumentParser) -> None:
    common_arguments(parser)
    parser.add_argument(
        "--min-list-interval",
        type=seconds(3600.0),
        default=DEFAULT_MIN_LIST_INTERVAL,
        help="seconds between pod-resources List calls (the kubelet allows 100 per second per node)",
    )
    parser.add_argument(
        "--list-refresh",
        type=seconds(3600.0),
        default=DEFAULT_LIST_REFRESH,
        help="while misc.current does not change, List again after this many seconds (default: %(default)s)",
    )
    parser.add_argument(
        "--pods-url",
        help="the node's pod list (the kubelet's /pods endpoint): own devices of pods whose guest has not "
        "started are not counted as charged keys (without it every own device is)",
    )


def serve_reconciler(args: argparse.Namespace, make: type[Reconciler], **extra) -> int:
    """Run a reconciler class as a plugin process until SIGTERM."""
    logging.basicConfig(level=args.log_level.upper(), format=f"%(asctime)s {make.__name__} %(levelname)s %(message)s")
    args.misc_resource = canonical_resource(args.misc_resource)
    kubelet_dir = Path(args.kubelet_dir or sockets.kubelet_dir(args.host_root))
    service = DevicePluginService(args.resource_name)
    reconciler = make(
        service,
        HostReader(os.fspath(args.host_root)),
        args.misc_resource,
        kubelet_dir,
        min_list_interval=args.min_list_interval,
        list_refresh=args.list_refresh,
        pods_url=args.pods_url or None,
        **extra,
    )
    # Publish the kernel's view before the first registration, so the first ListAndWatch answer is real.
    capacity, _ = reconciler.read_kernel()
    service.set_devices([Device(i) for i in device_ids(args.misc_resource, capacity or 0)])
    try:
        return run_plugin(args, service, poll=reconciler.poll, stats=reconciler.stats)
    finally:
        reconciler.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m teesim.plugins.reconciling", description=__doc__.splitlines()[0])
    add_reconciler_arguments(parser)
    args = parser.parse_args(argv)
    return serve_reconciler(args, Reconciler)


if __name__ == "__main__":
    sys.exit(main())
