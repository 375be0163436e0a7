"""`make fleet-report` end to end (scripts/fleet_report.py): the six nodes the README describes, on any clone (the H100
capture ships with teesim), and the worked outputs of docs/fleet.md are what it prints and writes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def fleet_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    out = tmp_path_factory.mktemp("fleet")
    completed = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "fleet_report.py"), "--out", str(out)],
        capture_output=True,
        text=True,
        env=dict(os.environ, ANSIBLE_NOCOLOR="1"),
        cwd=REPO,
        timeout=900,
    )
    assert completed.returncode == 0, completed.stdout[-4000:] + completed.stderr[-4000:]
    return completed, out


def test_six_nodes_with_the_h100_capture(fleet_report):
    completed, out = fleet_report
    assert "6 nodes, 4 ready; not ready: gpu-h100, tdx-nomisc" in completed.stdout
    assert sorted(p.name for p in (out / "nodes").iterdir()) == [
        "gpu-h100",
        "snp-1",
        "tdx-1",
        "tdx-2",
        "tdx-nomisc",
        "tdx-old",
    ]


def test_docs_show_what_it_prints_and_writes(fleet_report, check_worked_output):
    completed, out = fleet_report
    check_worked_output("make fleet-report", completed.stdout, {str(out): ".build/fleet"})
    check_worked_output("fleet report nodes", (out / "report" / "report.md").read_text())
    report = json.loads((out / "report" / "report.json").read_text())
    nomisc = next(node for node in report["nodes"] if node["name"] == "tdx-nomisc")
    check_worked_output("preflight table", "\n".join(nomisc["table"]))
