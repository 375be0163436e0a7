"""``teesim grpc``: the real-socket latency run, end to end through the CLI."""

from __future__ import annotations

import json
import re

import pytest
from teesim.cli import main
from teesim.grpc_run import LatencyResult, percentile


def test_percentile_is_nearest_rank():
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile([3.0], 99) == 3.0
    assert LatencyResult(0.1, [], 2).summary()["timeouts"] == 2


@pytest.mark.slow
def test_teesim_grpc_prints_p50_and_p99(capsys):
    assert main(["grpc", "--changes", "6", "--poll-interval", "0.05", "--capacity", "4"]) == 0
    out = capsys.readouterr().out
    match = re.search(
        r"poll interval 50 ms: 6 misc.current changes, detection latency p50 ([\d.]+) ms, p99 ([\d.]+)", out
    )
    assert match, out
    p50, p99 = float(match.group(1)), float(match.group(2))
    assert 0 < p50 <= p99
    assert "0 not seen in time" in out


@pytest.mark.slow
def test_teesim_grpc_json(capsys):
    assert main(["grpc", "--json", "--changes", "4", "--poll-interval", "0.02", "--capacity", "2"]) == 0
    (summary,) = json.loads(capsys.readouterr().out)
    assert summary["poll_interval_ms"] == 20
    assert summary["changes"] == 4
    assert summary["timeouts"] == 0
    assert 0 < summary["min_ms"] <= summary["p50_ms"] <= summary["p99_ms"] <= summary["max_ms"]


def test_teesim_grpc_rejects_bad_arguments(capsys):
    with pytest.raises(SystemExit) as info:
        main(["grpc", "--changes", "0"])
    assert info.value.code == 2
    assert "argument --changes: expected an integer from 1 to 100000, got '0'" in capsys.readouterr().err
