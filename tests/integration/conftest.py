"""Real `ansible-playbook` runs with the JSON callback, over inventories of simulated node trees."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml


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


@pytest.fixture(scope="session")
def playbook(ansible_playbook_cli):
    """``run(run_dir, tasks, hosts, check_mode=False) -> PlaybookRun``: one play over local-connection hosts."""

    def run(
        run_dir: Path, tasks: list[dict[str, Any]], hosts: dict[str, dict[str, Any]], check_mode: bool = False
    ) -> PlaybookRun:
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
        args = ["-i", "inventory.yml", *(["--check"] if check_mode else [])]
        completed = ansible_playbook_cli(
            "play.yml", *args, env={"ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json"}, cwd=run_dir
        )
        return PlaybookRun(completed)

    return run
