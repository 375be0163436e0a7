"""What a device plugin sees of ``teesim serve``, in the build that runs (``make test`` runs this file on the
native build, which ``make demo`` installs, and again on the source: ``TEESIM_NATIVE=0``).

Issue 27: in the native build the compiled simulation ignored serve's kubelet, so the plugin's
``Allocate`` was never called, pod-resources ``List`` showed nothing, ``GetPreferredAllocation`` was never
asked, and a plugin whose ``Allocate`` always fails passed ``--fail-on admission-failures``.
The plugin (``probe_plugin.py``) records every call the kubelet makes.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import teesim._native as native

HERE = Path(__file__).resolve().parent
SIMULATOR = HERE.parents[2] / "simulator"
KV = "devices.kubevirt.io/tdx"
# Two VMIs that fit (4 keys), each 2 s; 4 s in all.
SCENARIO = """\
name: probe
seed: 1
duration: 4
settings: {poll_interval: 0.5, node_status_interval: 1}
nodes:
  - {name: tdx-node, vendor: intel, profile: current, capacity: {tdx: 4}}
workloads:
  - {consumer: kubevirt, resource: tdx, at: 0.5, count: 2, duration: 2, launch_delay: 0.2}
"""


def serve_probe(tmp_path: Path, *plugin_flags: str, fail_on: str = "admission-failures"):
    """Run ``teesim serve`` with the probe plugin; (completed process, the plugin's calls, the state file)."""
    scenario = tmp_path / "probe.yaml"
    scenario.write_text(SCENARIO, encoding="utf-8")
    record = tmp_path / "calls.jsonl"
    root = Path(tempfile.mkdtemp(prefix="ts-", dir="/tmp"))  # Unix socket paths stay short
    plugin = f"{sys.executable} {HERE / 'probe_plugin.py'} --host-root $TEESIM_HOST_ROOT --record {record}"
    command = [
        *(sys.executable, "-m", "teesim.cli", "serve", str(scenario), "--root", str(root / "node")),
        *("--compare", "none", "--plugin", " ".join([plugin, *plugin_flags])),
        *("--fail-on", fail_on, "--fail-on", "not-registered"),
    ]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(SIMULATOR), os.environ.get("PYTHONPATH")]))}
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, check=False)
        state = json.loads((root / "node" / "teesim-serve.json").read_text(encoding="utf-8"))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    calls = [json.loads(line) for line in record.read_text(encoding="utf-8").splitlines()] if record.exists() else []
    return done, calls, state


def test_the_tests_run_on_the_build_they_say() -> None:
    """Under ``make test`` the native run is TEESIM_NATIVE=1 (a stale build is an error, not the source)."""
    requested = os.environ.get(native.ENVIRONMENT)
    if requested not in ("0", "1"):
        pytest.skip(f"{native.ENVIRONMENT} is not set: whichever build is fresh runs ({native.status()['reason']})")
    assert native.status()["build"] == {"0": "source", "1": "native"}[requested]


@pytest.mark.slow
def test_a_plugin_whose_allocate_fails_fails_the_run(tmp_path):
    done, calls, state = serve_probe(tmp_path, "--allocate-error")
    assert done.returncode == 1, done.stderr
    assert "--fail-on admission-failures: 2 admission failure(s)" in done.stderr
    allocates = [c for c in calls if c["call"] == "Allocate"]
    assert len(allocates) == 2 and all(c["error"] for c in allocates)
    assert state["state"] == "done" and state["exit_status"] == 1


@pytest.mark.slow
@pytest.mark.parametrize("pre_start", [True, False], ids=["pre_start_required", "no_pre_start"])
def test_the_kubelet_asks_the_plugin_and_pod_resources_lists_what_it_allocated(tmp_path, pre_start):
    done, calls, state = serve_probe(tmp_path, *(["--pre-start-required"] if pre_start else []))
    assert done.returncode == 0, done.stderr
    kinds = [c["call"] for c in calls]
    assert kinds.count("GetPreferredAllocation") == 2, calls
    allocated = [c["devices"][0] for c in calls if c["call"] == "Allocate"]
    assert len(allocated) == 2 and all(len(ids) == 1 for ids in allocated)
    listed = [c for c in calls if c["call"] == "List"]
    assert {c["resource"] for c in listed} == {KV}
    assert sorted(c["ids"] for c in listed) == sorted(allocated)
    # The kubelet asks for the preferred devices before it allocates them.
    assert kinds.index("GetPreferredAllocation") < kinds.index("Allocate")
    # callPreStartContainerIfNeeded: before each container start, with the container's devices, only when the
    # plugin's options ask for it (manager.go, k8s.io/kubernetes v1.37.2).
    pre_starts = [c["devices"] for c in calls if c["call"] == "PreStartContainer"]
    assert sorted(pre_starts) == (sorted(allocated) if pre_start else [])
    assert state == {"state": "done", "exit_status": 0, "fail_on": [], "report": None}


@pytest.mark.parametrize(("signum", "name"), [(signal.SIGTERM, "SIGTERM"), (signal.SIGINT, "SIGINT")])
def test_a_signal_stops_serve_and_the_state_file_says_so(tmp_path, signum, name):
    """Issue 27: SIGTERM left ``{"state": "failed", "error": "143"}``; a stop is not a failure."""
    scenario = tmp_path / "probe.yaml"
    scenario.write_text(SCENARIO, encoding="utf-8")
    root = Path(tempfile.mkdtemp(prefix="ts-", dir="/tmp")) / "node"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(SIMULATOR), os.environ.get("PYTHONPATH")]))}
    command = [sys.executable, "-m", "teesim.cli", "serve", str(scenario), "--root", str(root), "--compare", "none"]
    # No plugin: serve waits for a registration (up to 60 s) when the signal comes.
    proc = subprocess.Popen(
        [*command, "--registration-timeout", "60"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().startswith("teesim serve: ready {")
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
        state = json.loads((root / "teesim-serve.json").read_text(encoding="utf-8"))
    finally:
        proc.kill()
        shutil.rmtree(root.parent, ignore_errors=True)
    assert proc.returncode == 128 + signum, err
    assert state == {"state": "stopped", "signal": name}
    assert f"teesim serve: stopped by {name}" in err
    assert "Traceback" not in err
