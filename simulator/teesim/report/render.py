"""Render a report: the side-by-side table, the JSON file, one PNG timeline per node.

The PNG (matplotlib, Agg backend: no display needed) has one row per strategy and one column per
misc resource of the node: kernel capacity and usage as lines, every advertised pool as a dashed line (the
resource VMIs request and, where Kata requests another one, NFD's), the keys charged by each consumer (Kata,
KubeVirt, external VMs) as stacked areas, and each failed launch as a cross on the kernel's usage.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from teesim.strategies.base import BASELINE, KATA_KEYS, KUBEVIRT_KEYS, STRATEGIES

ADMITTED = "both pools together: what the scheduler may place"
LEGEND_INCHES = 1.3  # below the panels: up to five rows of two legend entries
TABLE_ROWS: tuple[tuple[str, str], ...] = (
    ("failed launches (ENOSPC/EBUSY)", "failed_launches"),
    ("  kata (each sandbox try)", "failed_launches_by_consumer.kata"),
    ("  kubevirt", "failed_launches_by_consumer.kubevirt"),
    ("  external VMs", "failed_launches_by_consumer.external"),
    ("fails outside race window", "failed_outside_race_window_total"),
    ("  kata", "failed_outside_race_window.kata"),
    ("  kubevirt", "failed_outside_race_window.kubevirt"),
    ("  external VMs", "failed_outside_race_window.external"),
    ("kata pods that failed a launch", "kata.pods_with_failed_launch"),
    ("kata pods never started", "kata.never_started"),
    ("VMIs that failed a launch", "kubevirt.pods_with_failed_launch"),
    ("VMIs never started", "kubevirt.never_started"),
    ("admission failures", "admission_failures"),
    ("kata pods rejected at kubelet restart", "rejected_at_kubelet_restart.kata"),
    ("stranded key-s (for VMIs)", "stranded_key_seconds"),
    ("stranded key-s (for anyone)", "stranded_for_all_key_seconds"),
    ("pending pod-seconds", "pending_pod_seconds"),
    ("max pending pods", "max_pending"),
    ("pending at end", "pending_at_end"),
    ("detection p50 (s)", "detection.p50_s"),
    ("detection p99 (s)", "detection.p99_s"),
    ("changes never detected", "detection.undetected"),
    ("held devices made unhealthy", "kubelet.allocated_devices_marked_unhealthy"),
    ("guests launched", "launched_total"),
)


def _lookup(metrics: dict[str, Any], dotted: str) -> Any:
    if dotted == "launched_total":
        return sum(metrics["launched"].values())
    if dotted == "failed_outside_race_window_total":
        return sum(metrics["failed_outside_race_window"].values())
    value: Any = metrics
    for part in dotted.split("."):
        value = value[part]
    return value


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.1f}" if value >= 100 else f"{value:.2f}"
    return str(value)


def format_table(report: dict[str, Any]) -> str:
    """The comparison table, strategies side by side."""
    names = list(report["strategies"])
    header = ["metric", *(f"{n} (baseline)" if n == BASELINE else n for n in names)]
    rows = [header]
    for label, key in TABLE_ROWS:
        rows.append([label, *(_cell(_lookup(report["strategies"][n]["metrics"], key)) for n in names)])
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = [
        f"scenario {report['scenario']} (seed {report['seed']}, {report['duration_s']:g} s virtual, "
        f"{len(report['nodes'])} node(s), {report['arrivals']} arrivals)"
    ]
    for index, row in enumerate(rows):
        cells = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)]
        lines.append("  ".join(cells).rstrip())
        if index == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines) + "\n"


def deterministic_json(report: dict[str, Any]) -> str:
    """The report without wall-clock fields: identical for identical inputs."""
    stable = {k: v for k, v in report.items() if not k.startswith("_")}
    return json.dumps(stable, indent=1, sort_keys=True) + "\n"


def write_json(report: dict[str, Any], path: Path) -> None:
    path.write_text(json.dumps(report, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def write_timelines(report: dict[str, Any], out: Path) -> list[Path]:
    """One ``timeline-<node>.png`` per node; returns the paths written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(report["strategies"])
    written: list[Path] = []
    for node in report["nodes"]:
        resources = sorted(node["capacity"])
        height = 2.4 * len(names) + LEGEND_INCHES
        fig, axes = plt.subplots(
            len(names),
            len(resources),
            figsize=(8.5 * len(resources), height),
            squeeze=False,
            sharex=True,
        )
        for row, name in enumerate(names):
            timelines = report["strategies"][name]["timeline"]
            for col, resource in enumerate(resources):
                ax = axes[row][col]
                data = timelines.get(f"{node['name']}/{resource}")
                failed = _failed_launches(report["strategies"][name], node["name"], resource)
                if data:
                    _plot(ax, data, report["duration_s"], failed, _pool_labels(name, resource))
                ax.set_title(f"{name}: {resource}, {_count(failed, 'failed launch', 'failed launches')}", fontsize=9)
                ax.set_ylabel("keys", fontsize=8)
                ax.tick_params(labelsize=7)
        for ax in axes[-1]:
            ax.set_xlabel("virtual time (s)", fontsize=8)
        legend: dict[str, Any] = {}
        for ax in axes.flat:  # every entry once, from whichever panel drew it (the baseline draws both pools)
            for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
                legend.setdefault(label, handle)
        fig.legend(list(legend.values()), list(legend), loc="lower center", ncol=2, fontsize=8, frameon=False)
        fig.suptitle(
            f"{report['scenario']}: {node['name']} ({node['vendor']}, kernel {node['profile']})",
            y=0.995,
            fontsize=10,
        )
        fig.tight_layout(rect=(0, LEGEND_INCHES / height, 1, 1 - 0.3 / height))
        path = out / f"timeline-{node['name']}.png"
        fig.savefig(path, dpi=90)
        plt.close(fig)
        written.append(path)
    return written


def _failed_launches(strategy: dict[str, Any], node: str, resource: str) -> list[float]:
    """Times of the failed KVM launches on one node and resource (the report keeps the first 200 failures)."""
    return [
        f["time"]
        for f in strategy.get("failures", [])
        if f["kind"] == "launch" and f["node"] == node and f["resource"] == resource
    ]


def _count(times: list[float], one: str, many: str) -> str:
    return f"{len(times)} {one if len(times) == 1 else many}"


def _at(t: list[float], values: list[float], when: float) -> float:
    """The value of a step series (``where="post"``) at time ``when``."""
    value = values[0]
    for time, current in zip(t, values, strict=True):
        if time > when:
            break
        value = current
    return value


def _pool_labels(strategy: str, resource: str) -> tuple[str, str | None]:
    """Legend labels of the ``advertised`` and ``nfd`` columns: the resource VMIs request, and NFD's resource
    when it is a second pool (Kata requests it while VMIs request KubeVirt's); ``None`` when it is not."""
    known = STRATEGIES.get(strategy)
    kata, kubevirt = KATA_KEYS.get(resource, resource), KUBEVIRT_KEYS.get(resource, resource)
    if known is None:  # a plugin under test (teesim serve): what it advertises for VMIs
        return "advertised: VMIs' resource", f"advertised: {kata} (NFD, Kata)"
    if known.vmi_key == "kubevirt":
        second = f"advertised: {kata} (NFD, Kata)" if known.kata_key == "kata" else None
        return f"advertised: {kubevirt} (VMIs)", second
    return f"advertised: {kata} (VMIs and Kata)", None


def _plot(ax: Any, data: dict[str, Any], duration: float, failed: list[float], labels: tuple[str, str | None]) -> None:
    columns = data["columns"]
    rows = data["rows"] + [[duration, *data["rows"][-1][1:]]]
    series = {name: [r[i] for r in rows] for i, name in enumerate(columns)}
    t = series["t"]
    ax.stackplot(
        t,
        series["kata"],
        series["kubevirt"],
        series["external"],
        labels=["charged: Kata", "charged: KubeVirt", "charged: external VMs"],
        colors=["#8fbcd4", "#f4b183", "#c9a0dc"],
        step="post",
        alpha=0.8,
    )
    ax.step(t, series["capacity"], where="post", color="black", linewidth=1.2, label="kernel capacity")
    ax.step(t, series["current"], where="post", color="red", linewidth=1.0, label="kernel usage")
    ax.step(t, series["advertised"], where="post", color="blue", linestyle="--", linewidth=2.0, label=labels[0])
    two_pools = bool(labels[1]) and any(series["nfd"])
    top = max(max(series["capacity"]), max(series["advertised"]), max(series["nfd"]))
    if two_pools:  # NFD's resource, which Kata's RuntimeClass overhead requests: a second pool of the same keys
        ax.step(t, series["nfd"], where="post", color="green", linestyle="-.", linewidth=1.2, label=labels[1])
        admitted = [a + n for a, n in zip(series["advertised"], series["nfd"], strict=True)]
        ax.step(t, admitted, where="post", color="grey", linestyle=":", linewidth=1.5, label=ADMITTED)
        top = max(top, max(admitted))
    if failed:
        ax.plot(
            failed,
            [_at(t, series["current"], when) for when in failed],
            linestyle="none",
            marker="x",
            color="black",
            markersize=5,
            label="failed launch (ENOSPC/EBUSY)",
        )
    ax.set_xlim(0, duration)
    ax.set_ylim(0, top * 1.1 + 1)
