"""``tee-key-agent`` as a process: arguments, exit codes, ``--once``, a clean stop on SIGTERM, a kill mid-run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ansible_collections.confidential.tee.plugins.module_utils.agent import cli

from .conftest import host_tree

COLLECTIONS = Path(__file__).resolve().parents[5] / ".build" / "collections"
MODULE = "ansible_collections.confidential.tee.plugins.module_utils.agent.cli"


def agent(*args: str, **options) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(COLLECTIONS), NODE_NAME="n1")
    return subprocess.Popen(
        [sys.executable, "-m", MODULE, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def finished(*args: str) -> subprocess.CompletedProcess:
    process = agent(*args)
    out, err = process.communicate(timeout=60)
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def wait_for(condition, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


def test_help_and_version():
    shown = finished("--help")
    assert shown.returncode == 0 and "--reserve RESOURCE=N" in shown.stdout and "--once" in shown.stdout
    version = finished("--version")
    assert version.returncode == 0 and version.stdout.strip() == f"tee-key-agent {cli.collection_version()}"
    assert cli.collection_version() != "unknown"


@pytest.mark.parametrize(
    "args, words",
    [
        (["--reserve", "gpu=1"], "expected RESOURCE=N"),
        (["--reserve", "tdx=-1"], "expected RESOURCE=N"),
        (["--interval", "0"], "between 0.05 and 3600"),
        (["--log-format", "xml"], "invalid choice"),
        (["--host-root", "/nonexistent/root"], "is not a directory"),
    ],
)
def test_bad_arguments_exit_2(args, words):
    result = finished(*args, "--once")
    assert result.returncode == 2 and words in result.stderr


def test_unusable_credentials_exit_1(tmp_path):
    bad = tmp_path / "kubeconfig"
    bad.write_text("current-context: nowhere\n")
    result = finished("--kubeconfig", str(bad), "--host-root", str(host_tree(tmp_path)), "--once")
    assert result.returncode == 1 and "no context named 'nowhere'" in result.stderr
    assert "Traceback" not in result.stderr


def test_reserve_names():
    args = cli.parser().parse_args(["--reserve", "snp=4", "--reserve", "tdx.intel.com/keys=2"])
    assert dict(args.reserve) == {"sev_es": 4, "tdx": 2}


def test_once_prints_the_decision_and_writes_nothing(fake_api, tmp_path):
    api, config = fake_api
    root = host_tree(tmp_path, "tdx 63\nsev_es 99\n", "tdx 2\nsev_es 0\n")
    result = finished("--once", "--kubeconfig", str(config), "--host-root", str(root), "--reserve", "snp=9")
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    pools = {p["resource"]: p["pool"] for p in shown["pools"]}
    assert pools == {"tdx.intel.com/keys": 61, "sev-snp.amd.com/esids": 90}
    assert shown["node"] == "n1" and shown["condition"]["status"] == "True" and not shown["written"]
    assert not api.patches


def test_runs_until_sigterm_and_a_killed_agent_is_replaced(fake_api, tmp_path):
    api, config = fake_api
    root = host_tree(tmp_path, "tdx 63\n", "tdx 0\n")
    args = ("--kubeconfig", str(config), "--host-root", str(root), "--interval", "0.05", "--log-format", "json")
    first = agent(*args)
    wait_for(lambda: api.pool() == ("63", "63"))
    host_tree(tmp_path, "tdx 63\n", "tdx 5\n")
    wait_for(lambda: api.pool() == ("58", "58"))
    first.kill()  # SIGKILL, whenever it is in its loop: the Node keeps the last whole PATCH
    first.wait(timeout=60)
    assert api.pool() in (("58", "58"),)
    host_tree(tmp_path, "tdx 63\n", "tdx 1\n")
    second = agent(*args)
    wait_for(lambda: api.pool() == ("62", "62"))
    second.send_signal(signal.SIGTERM)
    _out, err = second.communicate(timeout=60)
    assert second.returncode == 0
    logged = [json.loads(line) for line in err.splitlines()]
    assert any("tdx.intel.com/keys = 62" in entry["msg"] for entry in logged)
