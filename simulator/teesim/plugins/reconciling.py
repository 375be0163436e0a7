"""The reconciling device plugin (proposal 2), as a real gRPC plugin process.

Every ``--poll-interval`` seconds (the kernel sends no notification for misc usage) it reads
``misc.capacity`` and ``misc.current`` through the collection's parser, asks the kubelet's
pod-resources ``List`` which of its devices are allocated, and advertises ``current - own`` free
devices as Unhealthy (:func:`teesim.plugins.reconcile.next_unhealthy`). When ``misc.current``
cannot be read it keeps the previous verdict; when the kubelet cannot be asked (it is restarting)
it skips the poll, because without its own allocations every key would look foreign.

    python -m teesim.plugins.reconciling --host-root DIR --resource-name devices.kubevirt.io/tdx \\
        --misc-resource tdx --poll-interval 0.1
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
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
    """One poll = read the kernel, ask the kubelet, publish the device list."""

    def __init__(self, service: DevicePluginService, host_root: str, misc_resource: str, kubelet_dir: Path):
        self.service = service
        self.host_root = host_root
        self.misc_resource = misc_resource
        self.pod_resources_socket = sockets.pod_resources_socket(kubelet_dir)
        self._channel: grpc.Channel | None = None
        self._unhealthy: frozenset[str] = frozenset()
        self._ids: tuple[str, ...] = ()
        self._lock = threading.Lock()
        self.polls = 0
        self.skipped = 0

    def _list(self) -> pr.ListPodResourcesResponse:
        if self._channel is None:
            self._channel = sockets.channel(self.pod_resources_socket)
        try:
            return pr_grpc.PodResourcesListerStub(self._channel).List(
                pr.ListPodResourcesRequest(), wait_for_ready=True, timeout=LIST_TIMEOUT
            )
        except grpc.RpcError:
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

    def poll(self) -> None:
        with self._lock:
            self.polls += 1
            capacity, current = self.read_kernel()
            if capacity is not None:
                self._ids = device_ids(self.misc_resource, capacity)
            try:
                own = own_allocated_ids(self._list(), self.service.resource_name)
            except (grpc.RpcError, ValueError, OSError) as exc:
                self.skipped += 1
                log.info("pod-resources List unavailable, keeping the last device list: %s", exc)
                return
            self._unhealthy = next_unhealthy(self._ids, own, current, self._unhealthy)
            self.service.set_devices([Device(i, UNHEALTHY if i in self._unhealthy else HEALTHY) for i in self._ids])

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m teesim.plugins.reconciling", description=__doc__.splitlines()[0])
    common_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s reconciling %(levelname)s %(message)s")
    args.misc_resource = canonical_resource(args.misc_resource)
    kubelet_dir = Path(args.kubelet_dir or sockets.kubelet_dir(args.host_root))
    service = DevicePluginService(args.resource_name)
    reconciler = Reconciler(service, os.fspath(args.host_root), args.misc_resource, kubelet_dir)
    # Publish the kernel's view before the first registration, so the first ListAndWatch answer is real.
    capacity, _ = reconciler.read_kernel()
    service.set_devices([Device(i) for i in device_ids(args.misc_resource, capacity or 0)])
    try:
        return run_plugin(args, service, poll=reconciler.poll)
    finally:
        reconciler.close()


if __name__ == "__main__":
    sys.exit(main())
