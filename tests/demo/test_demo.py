"""`make demo` end to end: the script the README's first command runs, on a scratch output directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from teesim.strategies import STRATEGIES

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    out = tmp_path_factory.mktemp("demo")
    env = dict(os.environ, ANSIBLE_NOCOLOR="1")
    completed = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "demo.py"), "--out", str(out)],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=600,
    )
    return completed, out


def test_demo_succeeds_and_reports_capacity(demo):
    completed, out = demo
    assert completed.returncode == 0, completed.stdout[-4000:] + completed.stderr[-4000:]
    text = completed.stdout
    assert "tdx: capacity 63, in use 12 (root), free 51, peak 12" in text
    assert "tdx: 51 of 63 keys free >= 1" in text
    assert "failed=0" in text
    assert "tee: TDX" in text and "ready: true" in text
    # The roles' plan comes first: the TDX MachineConfig with its kernel arguments.
    assert text.index("kvm_intel.tdx=1") < text.index("tdx: capacity 63")
    assert (out / "manifests" / "99-worker-confidential-tee-tdx.yaml").is_file()
    assert (out / "sim-tdx-node" / "sys/fs/cgroup/misc.capacity").read_text() == "tdx 63\n"


def test_demo_writes_the_simulation_report(demo):
    completed, out = demo
    report = json.loads((out / "report" / "report.json").read_text())
    assert set(report["strategies"]) == set(STRATEGIES)
    assert "double-pool (baseline)" in completed.stdout
    assert "failed launches (ENOSPC/EBUSY)" in completed.stdout  # the comparison table
    # The simulated node is the node the demo built: its name, its keys, its 12 keys held outside Kubernetes.
    assert [(n["name"], n["capacity"]) for n in report["nodes"]] == [("sim-tdx-node", {"tdx": 63})]
    assert report["strategies"]["double-pool"]["metrics"]["failed_launches"] > 0
    assert (out / "report" / "timeline-sim-tdx-node.png").read_bytes()[:4] == b"\x89PNG"


def test_demo_ends_with_one_conclusion_line(demo):
    completed, out = demo
    last = completed.stdout.rstrip().splitlines()[-1]
    report = json.loads((out / "report" / "report.json").read_text())
    double = report["strategies"]["double-pool"]["metrics"]
    kernel = report["strategies"]["kernel-pool"]["metrics"]
    assert last.startswith("Conclusion: under the double pool (Kata and KubeVirt each advertise all 63 keys) ")
    assert f" {double['failed_launches']} launches failed on sim-tdx-node (" in last
    deployed = "kernel-pool (one pool the node agent keeps at what the kernel has free: tee_key_pool_mode: kernel)"
    assert kernel["failed_launches"] == 0 and kernel["pending_at_end"] == 0 and f"{deployed} had none" in last
    assert last.endswith(f"; timeline: {out / 'report' / 'timeline-sim-tdx-node.png'}")
    assert completed.stdout.count("Conclusion:") == 1


def test_the_readme_shows_what_the_demo_prints(demo, check_worked_output):
    completed, out = demo
    check_worked_output("make demo", completed.stdout, {str(out): ".build/demo"})


def test_the_conclusion_names_the_strategy_that_starts_every_guest():
    """A strategy that fails nothing by starting nothing does not avoid the problem."""
    demo = load_demo_script()

    def result(failed, never=0, pending=0):
        return {
            "metrics": {
                "failed_launches": failed,
                "failed_launches_by_consumer": {"kata": failed, "kubevirt": 0, "external": 0},
                "kata": {"never_started": never},
                "kubevirt": {"never_started": 0},
                "pending_at_end": pending,
            }
        }

    report = {
        "nodes": [{"capacity": {"tdx": 8}}],
        "strategies": {"double-pool": result(5), "split-nodes": result(0, pending=9), "reconciling": result(0)},
    }
    line = demo.conclusion(report, Path("t.png"))
    assert "5 launches failed on sim-tdx-node (kata 5); reconciling (KubeVirt's pool reconciled" in line
    report["strategies"]["reconciling"] = result(1)
    assert "; reconciling (KubeVirt's pool reconciled with misc.current) had 1;" in demo.conclusion(report, Path("t"))
    # A tie: the mode the collection deploys is named first.
    report["strategies"]["unified-reconciling"] = result(0)
    report["strategies"]["kernel-pool"] = result(0)
    assert "; kernel-pool (one pool the node agent keeps" in demo.conclusion(report, Path("t"))
    report["strategies"]["double-pool"] = result(0)
    assert demo.conclusion(report, Path("t")).startswith("Conclusion: no launch failed on sim-tdx-node")


def load_demo_script():
    import importlib.util

    sys.path.insert(0, str(REPO / "scripts"))  # demo.py imports steps.py beside it
    try:
        spec = importlib.util.spec_from_file_location("demo_script", REPO / "scripts" / "demo.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(REPO / "scripts"))
    return module
