"""The tee_fleet_report action plugin: in the worker on the controller, the module anywhere else, one result.

Action plugins are controller code: each case runs the plugin in a child interpreter (``CHILD``, through
``controller_child`` in tests/unit/plugins/conftest.py) and reads its result as JSON.
"""

from __future__ import annotations

import pytest

CHILD = """
import json, sys
from types import SimpleNamespace
from unittest import mock
from ansible.errors import AnsibleActionFail
from ansible.playbook.task import Task
from ansible_collections.confidential.tee.plugins.action.tee_fleet_report import ActionModule, runs_here

case = json.loads(sys.stdin.read())
if case.get("runs_here"):
    print(json.dumps({"here": runs_here(SimpleNamespace(transport=case["transport"]),
                                        SimpleNamespace(become=case["become"]))}))
    sys.exit(0)
task = Task()
task.args, task.action = case["args"], "confidential.tee.tee_fleet_report"
task.check_mode, task.diff = case["check_mode"], True
connection = SimpleNamespace(transport=case["transport"], _shell=SimpleNamespace(tmpdir=None))
play_context = SimpleNamespace(become=case["become"], check_mode=case["check_mode"])
loader = SimpleNamespace(get_basedir=lambda: case.get("basedir", "/nonexistent"))
plugin = ActionModule(task, connection, play_context, loader=loader, templar=None, shared_loader_obj=None)
with mock.patch.object(ActionModule, "_execute_module", return_value={"changed": False, "from": "module"}) as module:
    try:
        result = {"result": plugin.run(task_vars={})}
    except AnsibleActionFail as error:
        result = {"action_fail": str(error)}
result["module_calls"] = module.call_count
print(json.dumps(result, default=str))
"""


@pytest.fixture
def run_action(controller_child):
    def run(args=None, transport="local", become=False, check_mode=False, cwd=None, **extra) -> dict:
        case = dict(args=args or {}, transport=transport, become=become, check_mode=check_mode, **extra)
        return controller_child(CHILD, case, cwd=cwd)

    return run


@pytest.mark.parametrize(
    ("transport", "become", "here"),
    [("local", False, True), ("local", True, False), ("ssh", False, False), ("winrm", False, False)],
)
def test_runs_here_only_on_the_local_connection_as_the_same_user(run_action, transport, become, here):
    assert run_action(transport=transport, become=become, runs_here=True) == {"here": here}


def test_on_the_controller_it_writes_the_report_without_a_module(run_action, tmp_path):
    dest = tmp_path / "report"
    first = run_action({"dest": str(dest), "hosts": []})
    assert first["module_calls"] == 0
    result = first["result"]
    assert result["changed"] is True and not result.get("failed")
    assert sorted(p.name for p in dest.iterdir()) == ["report.html", "report.json", "report.md", "tee-fleet.prom"]
    assert result["summary"]["nodes"] == 0 and {f["format"] for f in result["files"]} >= {"html", "json"}
    assert "diff" in result
    again = run_action({"dest": str(dest), "hosts": []})["result"]
    assert again["changed"] is False and not any(f["changed"] for f in again["files"])


def test_check_mode_writes_nothing(run_action, tmp_path):
    dest = tmp_path / "report"
    result = run_action({"dest": str(dest), "hosts": []}, check_mode=True)["result"]
    assert result["changed"] is True and not dest.exists()


@pytest.mark.parametrize(("transport", "become"), [("ssh", False), ("local", True)])
def test_elsewhere_it_runs_the_module(run_action, tmp_path, transport, become):
    out = run_action({"dest": str(tmp_path), "hosts": []}, transport=transport, become=become)
    assert out["module_calls"] == 1 and out["result"]["from"] == "module"


def test_bad_arguments_and_inputs_fail_with_the_modules_messages(run_action, tmp_path):
    assert "hosts" in run_action({"dest": str(tmp_path)})["action_fail"]
    both = {"dest": str(tmp_path), "hosts": [], "kubernetes": {}, "kubernetes_dir": str(tmp_path)}
    assert "mutually exclusive" in run_action(both)["action_fail"]
    (tmp_path / "file").write_text("x")
    result = run_action({"dest": str(tmp_path / "file"), "hosts": []})["result"]
    assert result["failed"] and "is not a directory" in result["msg"]
    result = run_action({"dest": str(tmp_path / "r"), "hosts": [], "resource_map": {"x": "nope"}})["result"]
    assert result["failed"] and "resource_map values must be one of" in result["msg"]


def test_a_relative_dest_is_the_playbooks_directory_as_for_the_module(run_action, tmp_path):
    """The local connection runs a module in the playbook's directory (the loader's basedir), so a relative
    ``dest`` lands there, not in the directory ansible-playbook was started from."""
    playbooks, started = tmp_path / "playbooks", tmp_path / "elsewhere"
    playbooks.mkdir(), started.mkdir()
    result = run_action({"dest": "report", "hosts": []}, basedir=str(playbooks), cwd=str(started))["result"]
    assert result["changed"] and (playbooks / "report" / "report.json").is_file()
    assert not (started / "report").exists()
