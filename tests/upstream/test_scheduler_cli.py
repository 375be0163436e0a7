"""``teesim run --kube-scheduler KUBECONFIG``: the kube-scheduler mode from the command line, on a private control
plane (``scripts/kube_control_plane.py`` with its scheduler). In BOTH_BUILDS_TESTS: it runs the CLI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))
ARGS = ["serve-double-pool-tdx", "--seed", "4", "--strategy", "double-pool", "--strategy", "kata-overhead-on-kubevirt"]


def _teesim(*args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "simulator"), os.environ.get("PYTHONPATH")])),
    }
    command = [sys.executable, "-m", "teesim.cli", *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=300, check=False)


@pytest.fixture(scope="module")
def kubeconfig():
    if shutil.which("go") is None:
        pytest.skip("no go on PATH: the control plane is built from the Go module proxy (make k8s)")
    from kube_control_plane import ControlPlane

    with ControlPlane(scheduler=True) as plane:
        yield plane.admin_kubeconfig


@pytest.mark.slow
def test_teesim_run_with_kube_scheduler_reports_the_models_numbers_and_its_placements(kubeconfig):
    real = _teesim("run", *ARGS, "--json", "--quiet", "--kube-scheduler", str(kubeconfig))
    assert real.returncode == 0, real.stderr
    model = _teesim("run", *ARGS, "--json", "--quiet")
    real_report, model_report = json.loads(real.stdout), json.loads(model.stdout)
    placements = {name: entry.pop("placements") for name, entry in real_report["strategies"].items()}
    assert placements.keys() == {"double-pool", "kata-overhead-on-kubevirt"}
    for strategy, entry in real_report["strategies"].items():
        assert placements[strategy]["decisions"] > 0, placements
        assert placements[strategy]["fit_disagreements"] == [], placements
        assert entry == model_report["strategies"][strategy]
    # Kata's overhead on KubeVirt's resource: kube-scheduler refused Kata pods for want of devices.
    refused = placements["kata-overhead-on-kubevirt"]["refused"]
    assert any(pod.startswith("kata-") and "Insufficient devices.kubevirt.io/tdx" in m for pod, m in refused)


def test_a_missing_or_broken_kubeconfig_is_a_clear_error(tmp_path):
    missing = _teesim("run", *ARGS, "--quiet", "--kube-scheduler", str(tmp_path / "nope"))
    broken = tmp_path / "broken"
    broken.write_text("clusters: [\n")
    bad = _teesim("run", *ARGS, "--quiet", "--kube-scheduler", str(broken))
    for done in (missing, bad):
        assert done.returncode == 2
        assert "teesim run: error:" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert "not a usable kubeconfig" in bad.stderr
