"""``teesim run --real-node``: a small scenario played, paced, on a real node, its outcome the model's.

tests/node/real-node-small.yaml: one node with 3 TDX keys, a VM outside Kubernetes, two Kata pods and three VMIs,
every guest holding its key past the scenario's end, the strategy ``double-pool``. The real kube-scheduler and
kubelet admit all five pods (NFD's 3 keys for Kata, KubeVirt v1.9.0's 3 devices for VMIs), and the kernel
refuses the launches past its 3 keys with ENOSPC: the same guests start and fail, with the same errors, as in the
model's run of the same node (``teesim.report.real_node.model_outcome``). The arrivals are 7.5 s of wall time apart
at pace 2: the split of the failures between Kata and VMIs holds while a pod's guest launches within 7.5 s of the
next arrival (about 1 s here at load 6; make test runs these tests beside the VMs, at a load of 5 or so); a machine
slower than that can swap which guests fail (the total of three does not change). Then nothing of the run is left:
its node's directory, mounts, cgroups and processes are gone.

The same scenario under ``kernel-pool`` (the collection's node agent, tee-key-agent, keeping ``tdx.intel.com/keys`` at
what the kernel has free): no launch fails; the three pods that would have failed wait unscheduled, as in the model.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from teesim.cli import main
from teesim.report import real_node
from teesim.sim.scenario import load_scenario

from .conftest import _missing, command_lines

SCENARIO = Path(__file__).with_name("real-node-small.yaml")


def test_a_paced_run_on_the_real_node_matches_the_model(
    capsys: pytest.CaptureFixture[str], check_worked_output
) -> None:
    why = _missing()
    if why:
        pytest.skip(why)
    assert main(["run", "--real-node", str(SCENARIO), "--pace", "2", "--json"]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    real, model = report["real"], report["model"]
    assert real["failed_launch"] == {"kata": 1, "kubevirt": 2, "external": 0}  # the double pool's failed launches
    assert real["launch_errors"] == {"kata": {"ENOSPC": 1}, "kubevirt": {"ENOSPC": 2}}
    # Every count; each guest's times ("guests") differ by the real node's latencies, its launches tried too.
    assert {k: v for k, v in real.items() if k != "guests"} == {k: v for k, v in model.items() if k != "guests"}
    assert {uid: g["started"] is not None for uid, g in real["guests"].items()} == {
        uid: g["started"] is not None for uid, g in model["guests"].items()
    }
    # docs/simulator.md shows this run's table.
    plan = real_node.plan(load_scenario(str(SCENARIO)), None, None)
    check_worked_output("teesim run --real-node", real_node.format_outcomes(plan, report["pace"], real, model))

    workdir = re.search(r"workdir (/\S+)\)", captured.err)
    assert workdir, captured.err
    node_id = Path(workdir[1]).name
    assert not Path(workdir[1]).exists()
    assert node_id not in Path("/proc/self/mountinfo").read_text()
    assert not [c for c in Path("/sys/fs/cgroup").glob(f"*/{node_id}")]
    assert not [line for line in command_lines() if node_id in line]


def test_the_kernel_pool_on_the_real_node_fails_no_launch(
    capsys: pytest.CaptureFixture[str], check_worked_output
) -> None:
    why = _missing()
    if why:
        pytest.skip(why)
    assert main(["run", "--real-node", str(SCENARIO), "--pace", "2", "--strategy", "kernel-pool", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    real, model = report["real"], report["model"]
    assert real["failed_launch"] == {"kata": 0, "kubevirt": 0, "external": 0}
    assert real["unscheduled"] == {"kata": 1, "kubevirt": 2, "external": 0}
    assert {k: v for k, v in real.items() if k != "guests"} == {k: v for k, v in model.items() if k != "guests"}
    plan = real_node.plan(load_scenario(str(SCENARIO)), None, ["kernel-pool"])
    check_worked_output(
        "teesim run --real-node --strategy kernel-pool", real_node.format_outcomes(plan, report["pace"], real, model)
    )
