"""tee_key_agent into a host tree: the agent's files and unit, all or none; check mode writes nothing; a second run
changes nothing; and the agent as installed (nothing but its files and the standard library) runs against a
simulated node. The service under a real systemd is tests/vm/test_tee_node_reboots_real_kernel.py's."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
PREFIX = "/usr/local/lib/confidential-tee/agent"
UNIT = "etc/systemd/system/confidential-tee-key-agent.service"
CLI = "ansible_collections.confidential.tee.plugins.module_utils.agent.cli"
SYSTEMD_ANALYZE = shutil.which("systemd-analyze")


def _run(run_playbook, root: Path, *args: str, **role_vars) -> subprocess.CompletedProcess:
    play = {
        "name": "key agent",
        "hosts": "localhost",
        "connection": "local",
        "gather_facts": False,
        "vars": {"ansible_python_interpreter": sys.executable},
        "roles": [
            {
                "role": "confidential.tee.tee_key_agent",
                "vars": {
                    "tee_host_root": str(root),
                    "tee_key_agent_node_name": "tdx-1",
                    "tee_key_agent_python": "/usr/bin/python3",
                    **role_vars,
                },
            }
        ],
    }
    playbook = root.parent / "play.yml"
    playbook.write_text(json.dumps([play]))
    return run_playbook(playbook, *args)


def _tree(tmp_path: Path) -> Path:
    root = tmp_path / "host"
    (root / "usr/bin").mkdir(parents=True)
    (root / "usr/bin/python3").write_text("")
    (root / "etc/kubernetes").mkdir(parents=True)
    (root / "etc/kubernetes/kubelet.conf").write_text("{}\n")
    return root


def _installed(root: Path) -> set[str]:
    base = root / PREFIX.lstrip("/")
    return {str(p.relative_to(base)) for p in base.rglob("*") if p.is_file()} if base.exists() else set()


def test_check_mode_installs_nothing_then_the_role_installs_the_agent_once(tmp_path, ansible_playbook_cli):
    root = _tree(tmp_path)
    check = _run(ansible_playbook_cli, root, "--check")
    assert check.returncode == 0, check.stdout[-3000:]
    assert "Would install the key agent for node tdx-1" in check.flat
    assert _installed(root) == set() and not (root / UNIT).exists()

    first = _run(ansible_playbook_cli, root, tee_key_agent_reserve={"tdx": 2})
    assert first.returncode == 0, first.stdout[-3000:]
    files = _installed(root)
    package = "ansible_collections/confidential/tee/plugins/module_utils/"
    assert {package + "agent/cli.py", package + "agent/decision.py", package + "host/misc_cgroup.py"} <= files
    # Only what the agent imports: no module, filter or role of the collection beside it.
    assert not any(
        "/modules/" in f or "/filter/" in f or f.startswith("ansible_collections/confidential/tee/roles") for f in files
    )
    unit = (root / UNIT).read_text()
    assert "--node tdx-1" in unit and "--reserve tdx=2" in unit and "--kubeconfig /etc/kubernetes/kubelet.conf" in unit
    assert f"Environment=PYTHONPATH={PREFIX}" in unit

    again = _run(ansible_playbook_cli, root, tee_key_agent_reserve={"tdx": 2})
    assert again.returncode == 0, again.stdout[-3000:]
    assert "changed=0" in again.stdout.split("PLAY RECAP", 1)[1], again.stdout[-3000:]


def test_a_missing_kubeconfig_is_refused_before_anything_is_written(tmp_path, ansible_playbook_cli):
    root = _tree(tmp_path)
    (root / "etc/kubernetes/kubelet.conf").unlink()
    run = _run(ansible_playbook_cli, root)
    assert run.returncode != 0
    assert "has no /etc/kubernetes/kubelet.conf" in run.flat and "tee_key_agent_kubeconfig" in run.flat
    assert _installed(root) == set() and not (root / UNIT).exists()


def test_a_value_cannot_add_an_argument_or_a_setting(tmp_path, ansible_playbook_cli):
    root = _tree(tmp_path)
    run = _run(ansible_playbook_cli, root, tee_key_agent_node_name="tdx-1\nExecStartPre=/bin/sh")
    assert run.returncode != 0
    assert "control characters" in run.flat
    assert not (root / UNIT).exists()


def test_the_installed_agent_runs_alone_against_a_simulated_node(tmp_path, ansible_playbook_cli, teesim_node):
    root = _tree(tmp_path)
    assert _run(ansible_playbook_cli, root).returncode == 0
    node = teesim_node(tmp_path / "node", "--vendor", "intel")
    # -S: no site-packages (neither the checkout nor the virtualenv): the installed files and the standard library.
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(root / PREFIX.lstrip("/"))}
    python = [sys.executable, "-S", "-m", CLI]
    version = subprocess.run([*python, "--version"], env=env, cwd="/", capture_output=True, text=True, check=False)
    assert version.returncode == 0 and version.stdout.startswith("tee-key-agent "), version.stderr
    once = subprocess.run(
        [*python, "--once", "--dry-run", "--node", "tdx-1", "--host-root", str(node)],
        env=env,
        cwd="/",
        capture_output=True,
        text=True,
        check=False,
    )
    assert once.returncode == 0, once.stderr
    decided = json.loads(once.stdout)
    assert decided["node"] == "tdx-1" and decided["written"] is False
    (pool,) = decided["pools"]
    assert pool["misc"] == "tdx" and pool["resource"] == "tdx.intel.com/keys" and pool["capacity"] > 0


@pytest.mark.skipif(SYSTEMD_ANALYZE is None, reason="systemd-analyze is not installed")
def test_systemd_reads_the_unit_without_a_warning(tmp_path, ansible_playbook_cli):
    root = _tree(tmp_path)
    assert _run(ansible_playbook_cli, root).returncode == 0
    unit = tmp_path / "confidential-tee-key-agent.service"
    # Verified where systemd would find the python: the real one (the tree's is an empty stand-in).
    unit.write_text((root / UNIT).read_text().replace("/usr/bin/python3", sys.executable))
    done = subprocess.run([SYSTEMD_ANALYZE, "verify", str(unit)], capture_output=True, text=True, check=False)
    unit_lines = [line for line in done.stderr.splitlines() if unit.name in line]
    assert unit_lines == [], done.stderr
