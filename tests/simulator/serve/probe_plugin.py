"""A device plugin that records what the kubelet asks of it, for ``teesim serve``'s tests.

    python probe_plugin.py --host-root DIR --record FILE [--allocate-error] [--pre-start-required]

It advertises ``misc.capacity`` devices (teesim's static plugin's service) and appends one JSON line to
``FILE`` per call the kubelet makes (``GetPreferredAllocation``, ``Allocate``, ``PreStartContainer``),
plus each distinct non-empty device list the pod-resources ``List`` shows (polled every 0.1 s).
``--allocate-error``: every ``Allocate`` answers an error, as a broken plugin does.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading

import grpc
from teesim._collection import HostReader
from teesim.kubelet.devicemanager import Device
from teesim.kubelet.generated.deviceplugin.v1beta1 import api_pb2 as dp
from teesim.kubelet.generated.podresources.v1 import api_pb2 as pr
from teesim.kubelet.generated.podresources.v1 import api_pb2_grpc as pr_grpc
from teesim.plugins.base import DevicePluginService, common_arguments, run_plugin
from teesim.plugins.reconcile import device_ids
from teesim.plugins.static import read_capacity


class Recorder:
    def __init__(self, path: str):
        self.path = path
        self.lock = threading.Lock()

    def __call__(self, **entry: object) -> None:
        with self.lock, open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(entry, sort_keys=True) + "\n")


class ProbeService(DevicePluginService):
    def __init__(self, resource_name: str, record: Recorder, allocate_error: bool, pre_start: bool):
        options = dp.DevicePluginOptions(pre_start_required=pre_start, get_preferred_allocation_available=True)
        super().__init__(resource_name, options)
        self.record = record
        self.allocate_error = allocate_error

    def GetPreferredAllocation(self, request, context):
        self.record(call="GetPreferredAllocation", sizes=[r.allocation_size for r in request.container_requests])
        return super().GetPreferredAllocation(request, context)

    def Allocate(self, request, context):
        ids = [list(r.devices_ids) for r in request.container_requests]
        self.record(call="Allocate", devices=ids, error=self.allocate_error)
        if self.allocate_error:
            context.abort(grpc.StatusCode.INTERNAL, "probe: this plugin's Allocate always fails")
        return super().Allocate(request, context)

    def PreStartContainer(self, request, context):
        self.record(call="PreStartContainer", devices=list(request.devices_ids))
        return super().PreStartContainer(request, context)


def watch_pod_resources(socket: str, record: Recorder, stop: threading.Event) -> None:
    seen: set[str] = set()
    with grpc.insecure_channel(f"unix://{socket}") as channel:
        stub = pr_grpc.PodResourcesListerStub(channel)
        while not stop.wait(0.1):
            try:
                listed = stub.List(pr.ListPodResourcesRequest(), timeout=2)
            except grpc.RpcError:
                continue
            for pod in listed.pod_resources:
                for container in pod.containers:
                    for devices in container.devices:
                        key = f"{pod.name}/{devices.resource_name}/{','.join(devices.device_ids)}"
                        if devices.device_ids and key not in seen:
                            seen.add(key)
                            ids = list(devices.device_ids)
                            record(call="List", pod=pod.name, resource=devices.resource_name, ids=ids)


def main() -> int:
    parser = argparse.ArgumentParser()
    common_arguments(parser)
    parser.add_argument("--record", required=True)
    parser.add_argument("--allocate-error", action="store_true")
    parser.add_argument("--pre-start-required", action="store_true")
    args = parser.parse_args()
    record = Recorder(args.record)
    service = ProbeService(args.resource_name, record, args.allocate_error, args.pre_start_required)
    capacity = read_capacity(HostReader(args.host_root), args.misc_resource)
    service.set_devices([Device(i) for i in device_ids(args.misc_resource, capacity)])
    stop = threading.Event()
    watcher = threading.Thread(
        target=watch_pod_resources, args=(os.environ["TEESIM_POD_RESOURCES_SOCKET"], record, stop), daemon=True
    )
    watcher.start()
    try:
        return run_plugin(args, service, poll=None)
    finally:
        stop.set()


if __name__ == "__main__":
    sys.exit(main())
