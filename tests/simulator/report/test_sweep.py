"""Sweeps: seeds x strategies x scenarios, summaries with confidence intervals, the same report on
every engine, and ``teesim sweep``."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import teesim._native as native
from teesim.cli import main
from teesim.report.engines import make_engine
from teesim.report.render import deterministic_json
from teesim.report.runner import run_scenario
from teesim.report.sweep import (
    _T95,
    aggregate,
    flatten,
    format_sweep,
    make_tasks,
    parse_seeds,
    run_serial,
    run_task,
    summarise,
    sweep,
    t_critical,
)
from teesim.sim.scenario import load_scenario


def test_seed_lists_and_ranges() -> None:
    assert parse_seeds("1-4") == [1, 2, 3, 4]
    assert parse_seeds("3, 5,8") == [3, 5, 8]
    assert parse_seeds("1-3,2,9") == [1, 2, 3, 9]
    for bad, message in (("a", "not a number"), ("5-2", "backwards"), ("1-x", "not a number"), ("", "not a number")):
        with pytest.raises(ValueError, match=message):
            parse_seeds(bad)


def test_t_critical_values_shrink_towards_the_normal_and_round_down_the_df() -> None:
    assert t_critical(1) == 12.706 and t_critical(9) == 2.262
    assert t_critical(35) == _T95[30]  # between rows: the smaller df, the wider interval
    assert t_critical(500) == 1.960
    values = [t_critical(df) for df in range(1, 200)]
    assert values == sorted(values, reverse=True)
    with pytest.raises(ValueError, match=">= 1"):
        t_critical(0)


def test_summary_mean_spread_interval_and_unknowns() -> None:
    s = summarise([1, 2, 3])
    half = 4.303 * 1.0 / math.sqrt(3)
    assert s["mean"] == 2 and s["stdev"] == 1 and s["n"] == 3 and s["missing"] == 0
    assert s["ci95"] == [round(2 - half, 3), round(2 + half, 3)]
    assert (s["min"], s["max"]) == (1, 3)
    one = summarise([None, 5.0, None])
    assert (one["n"], one["missing"], one["mean"], one["ci95"], one["stdev"]) == (1, 2, 5.0, None, None)
    none = summarise([None, None])
    assert none["mean"] is None and none["n"] == 0


def test_flatten_keeps_numbers_and_unknowns_only() -> None:
    flat = flatten({"a": 1, "b": {"c": 2.5, "d": None, "e": "text"}, "f": True})
    assert flat == {"a": 1, "b.c": 2.5, "b.d": None}


def test_a_task_gives_what_teesim_run_gives_for_that_seed() -> None:
    (task,) = make_tasks(["quick"], [4], ["reconciling"])
    expected = run_scenario(load_scenario("quick", seed=4), ["reconciling"])["strategies"]["reconciling"]["metrics"]
    assert run_task(task)["metrics"] == expected


def test_report_is_the_same_on_every_worker_count_and_engine_but_runtime() -> None:
    tasks = make_tasks(["quick", "faults"], [1, 2, 3], ["kubevirt-static", "reconciling"])
    assert len(tasks) == 12
    serial = sweep(tasks, run_serial, "serial", 1)
    engine, workers = make_engine("process", 2)
    parallel = sweep(list(reversed(tasks)), engine, "process", workers)
    assert parallel["_runtime"]["workers"] == 2
    for report in (serial, parallel):
        report.pop("_runtime")
    assert deterministic_json(serial) == deterministic_json(parallel)
    quick = serial["results"]["quick"]["reconciling"]
    assert quick["failed_launches"]["n"] == 3
    assert [r["seed"] for r in serial["runs"][:2]] == [1, 1]


def test_aggregate_groups_by_scenario_and_strategy() -> None:
    runs = [
        {
            "scenario": "s",
            "seed": seed,
            "strategy": "x",
            "metrics": {"failed_launches": seed, "detection": {"p99_s": None}},
        }
        for seed in (1, 2, 3)
    ]
    result = aggregate(runs)["results"]["s"]["x"]
    assert result["failed_launches"]["mean"] == 2
    assert result["detection.p99_s"]["missing"] == 3


def test_make_engine_refuses_what_it_cannot_do() -> None:
    with pytest.raises(ValueError, match="unknown engine"):
        make_engine("slurm")
    with pytest.raises(ValueError, match="workers must be >= 1"):
        make_engine("process", 0)
    with pytest.raises(ValueError, match="--address is for the dask engine"):
        make_engine("process", 2, "127.0.0.1:6379")
    assert make_engine("serial", 8)[1] == 1


def test_cli_sweep_prints_the_table_and_writes_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["sweep", "quick", "--seeds", "1-3", "--strategy", "reconciling", "--strategy", "nfd-shared"]
    assert main([*args, "--engine", "serial", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "3 seeds (1..3)" in out and "reconciling" in out and "failed launches" in out
    report = json.loads((tmp_path / "sweep.json").read_text())
    assert report["sweep"]["strategies"] == ["nfd-shared", "reconciling"]  # the registry's order
    assert (tmp_path / "sweep.txt").read_text() == format_sweep(report)
    # Which build ran (teesim._native): the compiled modules or the source, and why.
    assert report["_runtime"]["build"] == native.status()
    assert f"on serial (1 workers), {native.status()['build']} build, in " in out
    assert main([*args, "--engine", "serial", "--json", "--quiet"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["sweep"]["seeds"] == [1, 2, 3] and captured.err == ""


def test_cli_sweep_errors_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sweep", "quick", "--seeds", "9-1"]) == 2
    assert "backwards" in capsys.readouterr().err
    assert main(["sweep", "no-such-scenario"]) == 2
    assert "no such file" in capsys.readouterr().err
