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
    assert list((out / "report").glob("timeline-*.png"))
