"""Sweep engines: the standard library's process pool here, and Dask (the optional cluster engine) as a
local cluster; its test is skipped, with the reason, when Dask is not installed (``make venv`` installs
it)."""

from __future__ import annotations

import sys

import pytest
from teesim.cli import main
from teesim.report.engines import EngineUnavailable, default_workers, longest_first, make_engine
from teesim.report.render import deterministic_json
from teesim.report.sweep import make_tasks, run_serial, sweep

TASKS = make_tasks(["quick", "tdx-kata-surge"], [1, 2], ["kubevirt-static", "reconciling"])


def _without_runtime(report: dict) -> str:
    report = dict(report)
    report.pop("_runtime")
    return deterministic_json(report)


def test_longest_tasks_go_first_and_every_task_stays() -> None:
    ordered = longest_first(TASKS)
    assert sorted(t.key for t in ordered) == sorted(t.key for t in TASKS)
    assert ordered[0].scenario == "tdx-kata-surge"  # 2400 s against quick's 600 s
    assert default_workers() >= 1


def test_a_missing_engine_package_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # None in sys.modules makes the import fail as it does when the package is absent.
    for module in ("dask", "dask.distributed", "distributed"):
        monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(EngineUnavailable, match=r"confidential-tee\[dask\]"):
        make_engine("dask", 2)
    assert main(["sweep", "quick", "--seeds", "1", "--engine", "dask"]) == 2
    assert "pip install 'confidential-tee[dask]'" in capsys.readouterr().err


@pytest.mark.slow
def test_dask_local_cluster_gives_the_same_report() -> None:
    pytest.importorskip(
        "dask.distributed", reason="Dask is an optional extra: pip install 'confidential-tee[dask]' to run this test"
    )
    engine, workers = make_engine("dask", 2)
    report = sweep(TASKS, engine, "dask", workers)
    assert report["_runtime"] == {**report["_runtime"], "engine": "dask", "workers": 2, "tasks": len(TASKS)}
    assert _without_runtime(report) == _without_runtime(sweep(TASKS, run_serial, "serial", 1))
