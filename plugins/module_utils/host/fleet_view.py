# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""The part of ``tee_host_info``'s preflight facts that the fleet report reads, and nothing else.

One home for that choice: ``tee_host_info`` returns this view with ``result: fleet`` (so that the host does not
serialise, and the controller does not parse, register and template, the 9 to 12 KB of the whole fact tree for
every node), and ``fleet_report.compact_result`` applies the same function to a full result registered by an older
playbook. Applying it to its own output changes nothing. Pure Python, standard library only.
"""

from __future__ import annotations

GPU_KEYS = ("probed", "present", "cc_capable", "cc_state", "ready_state")


def _pick(mapping, keys) -> dict:
    return {key: mapping[key] for key in keys if key in mapping}


def fleet_view(host: dict) -> dict:
    """The facts ``fleet_report`` reads from one host (kernel, vendor, GPU summary, misc cgroup, TDX key register
    summary, problems (their text only), the whole preflight verdict)."""
    capacity = host.get("capacity") or {}
    registers = host.get("hardware_keys") or {}
    gpu = host.get("gpu") or {}
    preflight = host.get("preflight")
    problems = [_pick(w, ("problem",)) for w in host.get("problems", host.get("warnings")) or []]
    return {
        "kernel": _pick(host.get("kernel") or {}, ("release", "version")),
        "tee_vendor": host.get("tee_vendor"),
        "gpu": dict(_pick(gpu, GPU_KEYS), gpus=[_pick(g, ("name",)) for g in gpu.get("gpus") or []]),
        "capacity": _pick(capacity, ("misc_controller", "resources", "cgroups")),
        "hardware_keys": dict(
            _pick(registers, ("tdx_misc_resource", "tdx_misc_reason")),
            tdx=_pick(registers.get("tdx") or {}, ("readable", "tdx_guest_keyids")),
        ),
        # The same list twice until release 0.3.0: "warnings" is its deprecated name.
        "problems": problems,
        "warnings": problems,
        "preflight": preflight if isinstance(preflight, dict) else None,
    }
