"""``teesim run --real-node`` without a real node: what it plays, the model's column, and every refusal (one line,
exit 2, no traceback). The real run itself is tests/node/test_real_node_run.py (root)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from teesim.cli import main
from teesim.cluster.pods import Consumer
from teesim.report import real_node
from teesim.sim.scenario import load_scenario
from teesim.sim.simulation import Settings

# The scenario tests/node/test_real_node_run.py plays on a real node (a VM outside Kubernetes, five pods, 3 keys).
SMALL = str(Path(__file__).resolve().parents[2] / "node" / "real-node-small.yaml")


def refusal(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["quick", "--strategy", "reconciling"], "--real-node drives double-pool, kubevirt-static, nfd-shared"),
        (["quick", "--strategy", "double-pool", "--strategy", "nfd-shared"], "runs one --strategy"),
        (["quick", "--node", "tdx-9"], "--node tdx-9: scenario quick has nodes tdx-node"),
        (["double-pool-snp"], "TDX nodes only"),
        (["faults"], "does not inject faults yet; node tdx-faulty has kubelet-restart at 600 s"),
        (["quick", "--out", "somewhere"], "no --out"),
    ],
)
def test_what_is_not_driven_is_refused_before_anything_starts(argv, expected, capsys) -> None:
    assert expected in refusal(["run", "--real-node", *argv], capsys)


def test_pace_and_node_belong_to_the_real_node(capsys) -> None:
    assert "--pace and --node go with --real-node" in refusal(["run", "quick", "--pace", "3"], capsys)


def test_outside_a_checkout_it_is_refused(monkeypatch, tmp_path, capsys) -> None:
    monkeypatch.setattr(real_node, "CHECKOUT", tmp_path)
    assert "not a checkout: run it from one" in refusal(["run", "--real-node", "quick"], capsys)


def test_without_root_it_is_refused(monkeypatch, capsys) -> None:
    monkeypatch.setattr(real_node.os, "geteuid", lambda: 1000)
    assert "--real-node needs root" in refusal(["run", "--real-node", "quick"], capsys)


def test_without_the_builds_it_names_the_make_targets(monkeypatch, capsys) -> None:
    monkeypatch.setattr(real_node.os, "geteuid", lambda: 0)
    monkeypatch.setattr(real_node.shutil, "which", lambda tool, path=None: f"/usr/bin/{tool}")
    asked = []

    def not_built(command, **_kwargs):
        asked.append(Path(command[1] if command[0] == sys.executable else command[0]).name)
        return subprocess.CompletedProcess(command, 1 if "build_node.py" in " ".join(command) else 0)

    monkeypatch.setattr(real_node.subprocess, "run", not_built)
    err = refusal(["run", "--real-node", "quick"], capsys)
    assert "needs the builds of `make k8s node upstream` (node not built)" in err
    assert asked == ["build_k8s.py", "build_node.py", "build.sh"]  # the plugin for double-pool's VMIs


def test_one_node_scenario_plays_every_arrival_and_the_model_counts_as_the_real_node() -> None:
    plan = real_node.plan(load_scenario(SMALL), None, None)
    assert (plan.node.name, plan.strategy.name, plan.keys, plan.nfd_keys) == ("tdx-node", "double-pool", 3, 3)
    assert plan.kubevirt_plugin and len(plan.arrivals) == 6
    # Counted once: the real node's pods have no CPU or memory requests (kubernetes/kubernetes#139627 needs them).
    assert not plan.world.settings.overhead_counted_twice
    assert plan.default_pace() == 1.0  # 120 s: no faster than real time
    model = real_node.model_outcome(plan)
    assert model["started"] == {"kata": 1, "kubevirt": 1, "external": 1}
    assert model["failed_launch"] == {"kata": 1, "kubevirt": 2, "external": 0}
    assert model["launch_errors"] == {"kata": {"ENOSPC": 1}, "kubevirt": {"ENOSPC": 2}}
    assert model["misc_current"] == 3
    table = real_node.format_outcomes(plan, 2.0, model, model)
    assert "120 s at pace 2 (60 s)" in table
    assert "launch errors: kubevirt            ENOSPC 2  ENOSPC 2" in table


def test_on_several_nodes_the_node_gets_what_the_models_scheduler_bound_there() -> None:
    scenario = load_scenario("tdx-external-vms")
    plan = real_node.plan(scenario, "tdx-2", ["secure-guest-resources"])
    others = real_node.plan(scenario, "tdx-1", ["secure-guest-resources"])
    assert plan.nfd_keys == 15 - 4 and not plan.kubevirt_plugin  # NFD's count less the reserved keys, no plugin
    mine, theirs = {real_node.uid(a) for a in plan.arrivals}, {real_node.uid(a) for a in others.arrivals}
    assert mine and theirs and not mine & theirs
    assert all(a.node == "tdx-2" for a in plan.arrivals if a.consumer.value == "external")
    pods = [a for a in scenario.world.arrivals if a.consumer.value != "external"]
    assert len([a for a in plan.arrivals + others.arrivals if a.consumer.value != "external"]) <= len(pods)


def test_the_guests_retry_by_the_models_rules_divided_by_the_pace() -> None:
    # virt-handler's back-off (5 ms doubling to 1000 s) and the kubelet's sandbox retry (10 s plus up to 5 s).
    vmi = real_node.retry_flags(Consumer.KUBEVIRT, Settings(), 2.0)
    assert vmi == ["-retry=0.002500s", "-retry-max=500.000000s", "-retry-jitter=0.000000s", "-retry-factor=2"]
    kata = real_node.retry_flags(Consumer.KATA, Settings(), 5.0)
    assert kata == ["-retry=2.000000s", "-retry-max=0.000000s", "-retry-jitter=1.000000s", "-retry-factor=1"]
