"""``scripts/teesim-serve-ns.sh``: a plugin that hard-codes /var/lib/kubelet and /sys/fs/cgroup runs
against ``teesim serve`` unchanged, in a private mount namespace; nothing outside it changes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "scripts" / "teesim-serve-ns.sh"
SCENARIO = REPO / "tests" / "simulator" / "external_plugins" / "serve-short.yaml"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "simulator"), env.get("PYTHONPATH")]))
    return env


def test_the_script_refuses_a_root_without_a_kubelet(tmp_path):
    done = subprocess.run([SCRIPT, str(tmp_path), "true"], capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 2
    assert f"no kubelet socket at {tmp_path}/var/lib/kubelet/device-plugins/kubelet.sock" in done.stderr
    assert "start 'teesim serve SCENARIO --root" in done.stderr


@pytest.mark.slow
def test_a_plugin_with_the_real_paths_runs_in_the_namespace(tmp_path):
    probe = ["unshare", "--mount", "--propagation", "private", "true"]
    if os.getuid() != 0:
        probe.insert(1, "--map-root-user")
    if shutil.which("unshare") is None or subprocess.run(probe, capture_output=True, check=False).returncode:
        pytest.skip("no private mount namespace here (unshare --mount refused): the script cannot run")
    kubelet_existed = Path("/var/lib/kubelet").exists()
    root = Path(tempfile.mkdtemp(prefix="ts-", dir="/tmp"))
    report_dir = tmp_path / "report"
    # --host-root /: the plugin reads /sys/fs/cgroup and dials /var/lib/kubelet, as on a real node.
    plugin = f"{SCRIPT} --cgroup $TEESIM_HOST_ROOT {sys.executable} -m teesim.plugins.reconciling --host-root /"
    command = [
        *(sys.executable, "-m", "teesim.cli", "serve", str(SCENARIO), "--root", str(root), "--report", str(report_dir)),
        *("--compare", "none", "--no-png", "--plugin", plugin, "--fail-on", "not-registered"),
        *("--fail-on", "plugin-exit"),
    ]
    try:
        done = subprocess.run(command, env=_env(), capture_output=True, text=True, timeout=120, check=False)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    assert done.returncode == 0, done.stderr + (report_dir / "plugin-1.log").read_text(encoding="utf-8")
    report = json.loads((report_dir / "report.json").read_text(encoding="utf-8"))
    served = report["strategies"]["external-plugin"]
    assert served["serve"]["registered_at_s"]["devices.kubevirt.io/tdx"] is not None
    assert served["metrics"]["launched"]["kubevirt"] >= 1
    assert Path("/var/lib/kubelet").exists() == kubelet_existed  # the namespace's mounts stayed in it
