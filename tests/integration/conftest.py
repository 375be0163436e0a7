"""Real `ansible-playbook` runs against node trees built by the real `teesim node build` command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def build_node(out: Path, *args: str) -> Path:
    subprocess.run([BIN / "teesim", "node", "build", "--out", str(out), *args], check=True, capture_output=True)
    return out


class PlaybookRun:
    """The JSON callback's output, indexed by task name and host."""

    def __init__(self, completed: subprocess.CompletedProcess[str]) -> None:
        self.returncode = completed.returncode
        self.stderr = completed.stderr
        try:
            self.data = json.loads(completed.stdout)
        except json.JSONDecodeError as error:
            raise AssertionError(
                f"ansible-playbook printed no JSON:\n{completed.stdout}\n{completed.stderr}"
            ) from error

    def result(self, task: str, host: str) -> dict[str, Any]:
        for play in self.data["plays"]:
            for entry in play["tasks"]:
                if entry["task"]["name"] == task and host in entry["hosts"]:
                    return entry["hosts"][host]
        raise KeyError(f"no result for task {task!r} on host {host!r}")

    @property
    def stats(self) -> dict[str, Any]:
        return self.data["stats"]


def ansible_playbook(
    run_dir: Path,
    tasks: list[dict[str, Any]],
    hosts: dict[str, dict[str, Any]],
    extra_env: dict[str, str] | None = None,
    check_mode: bool = False,
) -> PlaybookRun:
    """Write an inventory (local connection, one host per entry) and a one-play playbook, and run it."""
    inventory = {
        "all": {
            "hosts": {
                name: {"ansible_connection": "local", "ansible_python_interpreter": sys.executable, **variables}
                for name, variables in hosts.items()
            }
        }
    }
    (run_dir / "inventory.yml").write_text(yaml.safe_dump(inventory))
    play = [{"name": "integration", "hosts": "all", "gather_facts": False, "tasks": tasks}]
    (run_dir / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=str(REPO / ".build" / "collections"),
        ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
        ANSIBLE_NOCOLOR="1",
        **(extra_env or {}),
    )
    command = [str(BIN / "ansible-playbook"), "-i", "inventory.yml", "play.yml"] + (["--check"] if check_mode else [])
    completed = subprocess.run(command, capture_output=True, text=True, env=env, cwd=run_dir, timeout=300)
    return PlaybookRun(completed)


@pytest.fixture(scope="session")
def node_builder():
    """``build_node(out, *teesim_args)``: the real `teesim node build` command."""
    return build_node


@pytest.fixture(scope="session")
def playbook():
    """``ansible_playbook(run_dir, tasks, hosts, extra_env=None, check_mode=False) -> PlaybookRun``."""
    return ansible_playbook
