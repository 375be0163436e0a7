"""benchmarks/bench_simulator.py runs end to end on the smallest scenario and prints its figures
(it asserts nothing itself, so a broken benchmark would otherwise go unnoticed until someone needs it)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_simulator.py"


@pytest.mark.slow
def test_prints_every_strategy_and_where_the_time_goes():
    out = subprocess.run(
        # One seed of the sweep part and no baseline commit: the 30-seed sweep against HEAD~1 is minutes of
        # CPU, a figure for `make benchmark`, not for the test that the benchmark still runs.
        [
            sys.executable,
            str(SCRIPT),
            "--repeat",
            "1",
            "--no-fleet",
            "--sweep-seeds",
            "1-1",
            "--sweep-baseline",
            "",
            "quick",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=1200,  # a bound for a busy two-core machine, not a timing
    ).stdout
    sys.path.insert(0, str(SCRIPT.parents[1] / "simulator"))
    from teesim.sim.scenario import bundled_scenarios
    from teesim.strategies import STRATEGIES

    rows = [line.split() for line in out.splitlines() if line.startswith("quick ")]
    assert [row[1] for row in rows] == list(STRATEGIES)
    total = sum(int(row[2]) for row in rows)
    # The breakdown covers the same events, and its three parts are ordered as they must be: the loop
    # alone is cheaper than the model, which is cheaper without the report than with it.
    assert f"where the time goes, every pair ({total} events)" in out
    assert "sweep: teesim sweep, every bundled scenario x every strategy x seeds 1-1, 2 workers" in out
    # Both builds of this tree ran every bundled scenario under every strategy, with the same events.
    sweep_rows = [line.split()[2:5] for line in out.splitlines() if line.startswith("this tree, ")]
    runs = str(len(STRATEGIES) * len(bundled_scenarios()))
    assert [row[:2] for row in sweep_rows] == [["native", runs], ["source", runs]]
    assert sweep_rows[0][2] == sweep_rows[1][2]
    cpu = {
        label: float(seconds)
        for label, seconds in re.findall(
            r"^  (event loop alone|model without|model with the report)\D*?([\d.]+) cpu s", out, re.M
        )
    }
    # Only an order no load can turn round: the loop alone costs a few percent of the model (a 30x margin);
    # without and with the report differ by a third, which two CPU-time samples on a busy machine can invert.
    assert set(cpu) == {"event loop alone", "model without", "model with the report"}
    assert cpu["event loop alone"] < cpu["model without"] and cpu["model with the report"] > 0
