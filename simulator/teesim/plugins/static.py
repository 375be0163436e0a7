"""Today's KubeVirt TDX device plugin, as a real gRPC plugin process.

It reads ``misc.capacity`` once at start and advertises that many devices, all Healthy, forever:
keys taken by Kata pods or by VMs outside Kubernetes are invisible to it, so the scheduler keeps
placing VMs whose launch then fails with EBUSY.

    python -m teesim.plugins.static --host-root DIR --resource-name devices.kubevirt.io/tdx \\
        --misc-resource tdx
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from teesim._collection import HostReader, canonical_resource, read_misc_state
from teesim.kubelet.devicemanager import Device
from teesim.plugins.base import DevicePluginService, common_arguments, fail, run_plugin
from teesim.plugins.reconcile import device_ids


def read_capacity(host: HostReader, misc_resource: str) -> int:
    """``misc.capacity`` of one resource, or a ValueError saying why it cannot be known."""
    state = read_misc_state(host)
    if not state.layout.present:
        raise ValueError(state.layout.reason)
    resource = state.resource(misc_resource)
    if resource is None:
        return 0  # the kernel omits zero-capacity resources from misc.capacity
    if resource.capacity is None:
        problems = "; ".join(issue.describe() for issue in state.issues) or "unparsable value"
        raise ValueError(f"misc.capacity of {misc_resource} under {host.host_root} is unreadable: {problems}")
    return resource.capacity


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m teesim.plugins.static", description=__doc__.splitlines()[0])
    common_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s static %(levelname)s %(message)s")
    args.misc_resource = canonical_resource(args.misc_resource)
    try:
        capacity = read_capacity(HostReader(args.host_root), args.misc_resource)
    except ValueError as exc:
        return fail(str(exc))
    service = DevicePluginService(args.resource_name)
    service.set_devices([Device(i) for i in device_ids(args.misc_resource, capacity)])
    return run_plugin(args, service, poll=None)


if __name__ == "__main__":
    sys.exit(main())
