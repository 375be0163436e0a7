# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""TEE key metrics in the Prometheus text exposition format, for node_exporter's textfile collector.

Pure Python, standard library only; input is the fleet report (:func:`fleet_report.build_report`).
Naming follows the Prometheus conventions: a ``tee_`` prefix, snake_case, counters end in ``_total``,
no unit suffix for counts of keys. Every series has a ``node`` label (the Kubernetes node name), so one file
can hold a fleet and per-node files can be concatenated. A value that is unknown is left out (Prometheus has
no null), never written as 0.

``tee_misc_events_total`` is the sum of the top-level cgroups' ``misc.events`` ``<resource>.max`` counters:
charges refused because a cgroup hit its ``misc.max``. A charge refused because the whole host ran out of
keys fails at the root cgroup, which has no ``misc.events`` file, so alert on ``tee_keys_free`` for that.
"""

from __future__ import annotations

from ansible_collections.confidential.tee.plugins.module_utils.common.emit import prometheus as exposition

METRICS = (
    # (name, type, help)
    ("tee_keys_capacity", "gauge", "TEE keys the host has for guests (misc.capacity, or the hardware where noted)."),
    ("tee_keys_in_use", "gauge", "TEE keys charged to guests right now (root misc.current)."),
    ("tee_keys_peak", "gauge", "Highest number of TEE keys in use since boot (root misc.peak)."),
    ("tee_keys_free", "gauge", "TEE keys not in use (capacity minus in use)."),
    ("tee_misc_events_total", "counter", "Charges refused because a cgroup hit misc.max (top-level misc.events)."),
    ("tee_keys_advertised", "gauge", "TEE keys an extended resource advertises to the scheduler (allocatable)."),
    ("tee_keys_requested", "gauge", "TEE keys the pods bound to the node request from an extended resource."),
    ("tee_keys_outside_kubernetes", "gauge", "TEE keys in use that no running pod accounts for."),
    ("tee_keys_overcommit_worst_case", "gauge", "Guests the scheduler may place beyond the kernel's keys."),
    ("tee_drift_findings", "gauge", "Drift findings on the node, by finding and severity."),
    ("tee_preflight_ready", "gauge", "1 when the node can run confidential guests (preflight ready), else 0."),
    ("tee_preflight_checks", "gauge", "Preflight checks on the node, by verdict."),
    ("tee_node_reachable", "gauge", "1 when tee_host_info returned facts for the node, else 0."),
)


def _sample(name, labels, value) -> str:
    return exposition.sample(name, labels, int(value))


def _pool_samples(node, samples) -> None:
    name = node["node"]
    for resource, pool in node["pools"].items():
        labels = {"node": name, "resource": resource}
        if pool["capacity"] is not None:
            samples["tee_keys_capacity"].append(
                _sample("tee_keys_capacity", dict(labels, source=pool["source"] or "misc"), pool["capacity"])
            )
        for metric, key in (("tee_keys_in_use", "in_use"), ("tee_keys_peak", "peak"), ("tee_keys_free", "free")):
            if pool[key] is not None:
                samples[metric].append(_sample(metric, labels, pool[key]))
        if pool["events"] is not None:
            samples["tee_misc_events_total"].append(
                _sample("tee_misc_events_total", dict(labels, event="max"), pool["events"])
            )
        for advertised in pool["advertised"]:
            extended = dict(labels, extended_resource=advertised["name"])
            if advertised["allocatable"] is not None:
                samples["tee_keys_advertised"].append(
                    _sample("tee_keys_advertised", extended, advertised["allocatable"])
                )
            if advertised["requested"] is not None:
                samples["tee_keys_requested"].append(_sample("tee_keys_requested", extended, advertised["requested"]))
        held = [a["held_by_running_pods"] for a in pool["advertised"]]
        if pool["in_use"] is not None and held and None not in held:
            held = sum(held)
            samples["tee_keys_outside_kubernetes"].append(
                _sample("tee_keys_outside_kubernetes", labels, max(pool["in_use"] - held, 0))
            )
    for finding in node["findings"]:
        if finding["id"] == "double_pool":
            samples["tee_keys_overcommit_worst_case"].append(
                _sample(
                    "tee_keys_overcommit_worst_case",
                    {"node": name, "resource": finding["resource"]},
                    finding["numbers"]["worst_case_overcommit"],
                )
            )


def _node_samples(node, samples) -> None:
    name = node["node"]
    samples["tee_node_reachable"].append(_sample("tee_node_reachable", {"node": name}, 1 if node["reachable"] else 0))
    if node["reachable"]:
        samples["tee_preflight_ready"].append(_sample("tee_preflight_ready", {"node": name}, 1 if node["ready"] else 0))
        for verdict, count in sorted(node["counts"].items()):
            samples["tee_preflight_checks"].append(
                _sample("tee_preflight_checks", {"node": name, "verdict": verdict}, count)
            )
    counts: dict[tuple[str, str], int] = {}
    for finding in node["findings"]:
        key = (finding["id"], finding["severity"])
        counts[key] = counts.get(key, 0) + 1
    for (finding_id, severity), count in sorted(counts.items()):
        labels = {"node": name, "finding": finding_id, "severity": severity}
        samples["tee_drift_findings"].append(_sample("tee_drift_findings", labels, count))
    _pool_samples(node, samples)


def render_metrics(nodes) -> str:
    """The exposition text for ``nodes`` (entries of the report's ``nodes``); families without samples are left out."""
    samples: dict[str, list[str]] = {metric[0]: [] for metric in METRICS}
    for node in nodes:
        _node_samples(node, samples)
    lines = []
    for name, kind, text in METRICS:
        if samples[name]:
            lines += [exposition.help_line(name, text), exposition.type_line(name, kind), *samples[name]]
    return "\n".join(lines) + "\n" if lines else ""
