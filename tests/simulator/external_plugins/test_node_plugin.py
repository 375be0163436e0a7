"""A device plugin written in Node.js from the kubelet's upstream protos runs against ``teesim serve``
unchanged: nothing in the harness depends on the plugin being Python.

``npm ci`` installs ``@grpc/grpc-js`` and ``@grpc/proto-loader`` from the committed
``package-lock.json`` into a copy of the plugin (``--prefer-offline``: npm's cache is enough once it has
them). The test skips, saying why, only when ``node``/``npm`` are missing or the registry cannot be
reached with an empty cache.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
PLUGIN = HERE / "node"
SIMULATOR = HERE.parents[2] / "simulator"
PROTOS = SIMULATOR / "teesim" / "kubelet" / "protos"
NETWORK_ERRORS = ("ENOTFOUND", "EAI_AGAIN", "ETIMEDOUT", "ECONNREFUSED", "ECONNRESET", "ENETUNREACH", "ENOTCACHED")


def _npm_ci(where: Path) -> None:
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed: the Node.js plugin cannot be built")
    for name in ("package.json", "package-lock.json", "plugin.js"):
        shutil.copy(PLUGIN / name, where / name)
    command = ["npm", "ci", "--prefer-offline", "--no-audit", "--no-fund", "--ignore-scripts"]
    done = subprocess.run(command, cwd=where, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        output = done.stdout + done.stderr
        if any(code in output for code in NETWORK_ERRORS):
            pytest.skip(f"npm ci could not reach the registry and its cache lacks the packages: {output[-300:]}")
        pytest.fail(f"npm ci failed:\n{output}")


@pytest.mark.slow
def test_a_node_plugin_registers_serves_allocate_and_gets_a_report(tmp_path):
    build = tmp_path / "plugin"
    build.mkdir()
    _npm_ci(build)
    root = Path(tempfile.mkdtemp(prefix="ts-", dir="/tmp"))
    report_dir = tmp_path / "report"
    env = {**os.environ, "TEESIM_PROTOS": str(PROTOS)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SIMULATOR), env.get("PYTHONPATH")]))
    command = [
        *(sys.executable, "-m", "teesim.cli", "serve", str(HERE / "serve-short.yaml"), "--root", str(root)),
        *("--report", str(report_dir), "--compare", "double-pool", "--no-png"),
        *("--plugin", f"node {build / 'plugin.js'}", "--fail-on", "not-registered", "--fail-on", "plugin-exit"),
    ]
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, check=False)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    log = (report_dir / "plugin-1.log").read_text(encoding="utf-8")
    assert done.returncode == 0, done.stderr + log
    assert "plugin.js: registered devices.kubevirt.io/tdx with 4 devices" in log
    report = json.loads((report_dir / "report.json").read_text(encoding="utf-8"))
    assert set(report["strategies"]) == {"external-plugin", "double-pool"}
    served = report["strategies"]["external-plugin"]
    assert served["serve"]["plugins"] == [
        {"command": f"node {build / 'plugin.js'}", "exit_status": 0, "exited_early": False}
    ]
    # The kubelet allocated the Node plugin's devices to VMIs (its Allocate answered) and they ran.
    assert served["metrics"]["launched"]["kubevirt"] >= 1
    assert "external-plugin" in done.stdout and "double-pool (baseline)" in done.stdout
