"""``scripts/teesim-serve-ns.sh``: a plugin that hard-codes /var/lib/kubelet and /sys/fs/cgroup runs
against ``teesim serve`` unchanged, in a private mount namespace; nothing outside it changes."""

from __future__ import annotations

import json
import os
import shutil
import socket
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


def _namespaces_or_skip() -> None:
    probe = ["unshare", "--pid", "--fork", "--mount-proc", "true"]
    if os.getuid() != 0:
        probe.insert(1, "--map-root-user")
    if shutil.which("unshare") is None or subprocess.run(probe, capture_output=True, check=False).returncode:
        pytest.skip("no private mount and PID namespace here (unshare --pid --mount-proc refused)")


def test_pid_gives_proc_1_root_over_the_served_root_and_run_dir_an_empty_dir(tmp_path):
    # KubeVirt reads the host through /proc/1/root and watches /var/run/tdx-qgs: both must land in the namespace.
    _namespaces_or_skip()
    qgs_existed = Path("/run/tdx-qgs").exists()
    root = Path(tempfile.mkdtemp(prefix="ts-", dir="/tmp"))
    try:
        (root / "var/lib/kubelet/device-plugins").mkdir(parents=True)
        (root / "sys/fs/cgroup").mkdir(parents=True)
        (root / "sys/fs/cgroup/misc.capacity").write_text("tdx 8\n", encoding="utf-8")
        with socket.socket(socket.AF_UNIX) as kubelet:
            kubelet.bind(str(root / "var/lib/kubelet/device-plugins/kubelet.sock"))
            probe = "echo pid=$$; cat /proc/1/root/sys/fs/cgroup/misc.capacity; ls -A /proc/1/root/var/run/tdx-qgs"
            probe += "; echo end"
            done = subprocess.run(
                [SCRIPT, "--cgroup", "--pid", "--run-dir", "tdx-qgs", str(root), "bash", "-c", probe],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "pid=1\ntdx 8\nend\n"
    assert Path("/run/tdx-qgs").exists() == qgs_existed  # the tmpfs and the directory stayed in the namespace


@pytest.mark.parametrize("name", ["../etc", "a/b", "..", ""])
def test_run_dir_refuses_a_name_that_is_not_one_directory(tmp_path, name):
    done = subprocess.run(
        [SCRIPT, "--run-dir", name, str(tmp_path), "true"], capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 2
    assert "usage:" in done.stderr
