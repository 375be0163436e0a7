"""The timeline PNG shows what the demo's conclusion says: both advertised pools of a double pool (and their sum),
one pool elsewhere, and every failed launch on the node and resource where it happened."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from teesim.report import render
from teesim.report.runner import run_scenario
from teesim.sim.scenario import parse_scenario

SCENARIO = {
    "name": "two-pools",
    "seed": 1,
    "duration": 600,
    "nodes": [{"name": "n", "vendor": "intel", "profile": "current", "capacity": {"tdx": 8}}],
    "workloads": [
        {"consumer": "external", "resource": "tdx", "node": "n", "at": 0, "count": 2, "duration": 600},
        {"consumer": "kata", "resource": "tdx", "rate": 0.02, "duration": [200, 400]},
        {"consumer": "kubevirt", "resource": "tdx", "rate": 0.02, "duration": [200, 400]},
    ],
}


@pytest.fixture(scope="module")
def figures(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any]]:
    """The report of a small double-pool node and the figure ``write_timelines`` drew for it (kept, not closed)."""
    import matplotlib.pyplot as plt

    report = run_scenario(parse_scenario(SCENARIO, "test", None), ["double-pool", "unified-reconciling"], None)
    drawn: dict[str, Any] = {}
    close = plt.close
    plt.close = lambda fig=None: drawn.setdefault("fig", fig)  # type: ignore[assignment]
    try:
        paths = render.write_timelines(report, Path(tmp_path_factory.mktemp("png")))
    finally:
        plt.close = close
    assert [p.name for p in paths] == ["timeline-n.png"] and paths[0].read_bytes()[:4] == b"\x89PNG"
    yield report, drawn["fig"]
    close(drawn["fig"])


def labels(ax: Any) -> list[str]:
    return ax.get_legend_handles_labels()[1]


def test_double_pool_panel_shows_both_pools_their_sum_and_the_failed_launches(figures):
    report, fig = figures
    double, unified = fig.axes
    failed = [f for f in report["strategies"]["double-pool"]["failures"] if f["kind"] == "launch"]
    assert failed, "the scenario must make the double pool fail"
    assert {
        "advertised: devices.kubevirt.io/tdx (VMIs)",
        "advertised: tdx.intel.com/keys (NFD, Kata)",
        render.ADMITTED,
        "failed launch (ENOSPC/EBUSY)",
    } <= set(labels(double))
    assert double.get_title() == f"double-pool: tdx, {len(failed)} failed launches"
    marks = next(line for line in double.get_lines() if line.get_label() == "failed launch (ENOSPC/EBUSY)")
    assert list(marks.get_xdata()) == [f["time"] for f in failed]
    both = next(line for line in double.get_lines() if line.get_label() == render.ADMITTED)
    assert max(both.get_ydata()) == 16  # 8 keys advertised twice
    # One pool: no second pool, no sum; the legend gathers every label once from whichever panel drew it.
    assert "advertised: tdx.intel.com/keys (VMIs and Kata)" in labels(unified)
    assert render.ADMITTED not in labels(unified)
    legend = [text.get_text() for text in fig.legends[0].get_texts()]
    assert len(legend) == len(set(legend)) and render.ADMITTED in legend


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [
        ("double-pool", ("advertised: devices.kubevirt.io/tdx (VMIs)", "advertised: tdx.intel.com/keys (NFD, Kata)")),
        ("kata-overhead-on-kubevirt", ("advertised: devices.kubevirt.io/tdx (VMIs)", None)),
        ("unified-reconciling", ("advertised: tdx.intel.com/keys (VMIs and Kata)", None)),
        ("external-plugin", ("advertised: VMIs' resource", "advertised: tdx.intel.com/keys (NFD, Kata)")),
    ],
)
def test_pool_labels(strategy, expected):
    assert render._pool_labels(strategy, "tdx") == expected


def test_failed_launches_are_the_launches_of_that_node_and_resource():
    failures = [
        {"kind": "launch", "node": "n", "resource": "tdx", "time": 1.0},
        {"kind": "admission", "node": "n", "resource": "tdx", "time": 2.0},
        {"kind": "launch", "node": "m", "resource": "tdx", "time": 3.0},
        {"kind": "launch", "node": "n", "resource": "sev_es", "time": 4.0},
    ]
    assert render._failed_launches({"failures": failures}, "n", "tdx") == [1.0]
