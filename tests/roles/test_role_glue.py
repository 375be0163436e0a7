"""Role glue written once: the list check (role_inputs), API access through module_defaults, private variables.

The list check runs through the real ansible-playbook, one run per role with list variables, every list
variable given as a string at once; the other checks read the roles' YAML.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
ROLES = REPO / "roles"
SHARED_CHECK = "confidential.tee.role_inputs"
# Module arguments that choose the API server; given once through module_defaults, never per task.
API_ARGUMENTS = {"kubeconfig", "context", "host", "api_key", "username", "password", "ca_cert", "validate_certs"}


def _options(role: str) -> dict:
    path = ROLES / role / "meta" / "argument_specs.yml"
    if not path.exists():
        return {}
    return yaml.safe_load(path.read_text())["argument_specs"]["main"]["options"] or {}


def _list_options(role: str) -> dict:
    return {name: spec for name, spec in _options(role).items() if spec.get("type") == "list"}


def _roles() -> list[str]:
    return sorted(p.name for p in ROLES.iterdir() if (p / "tasks" / "main.yml").exists())


ROLES_WITH_LISTS = [role for role in _roles() if _list_options(role)]


def _outputs(role: str) -> set[str]:
    """The facts a role's README documents under "## Outputs"."""
    text = (ROLES / role / "README.md").read_text()
    section = re.search(r"^## Outputs\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    return set(re.findall(rf"`({role}_[a-z0-9_]+)`", section.group(1))) if section else set()


def _tasks(tasks):
    """Every task of a task list, blocks included, with the block itself."""
    for task in tasks or []:
        if not isinstance(task, dict):
            continue
        yield task
        for key in ("block", "rescue", "always"):
            yield from _tasks(task.get(key))


def _action(task: dict) -> str:
    keys = [k for k in task if "." in k or k in {"set_fact", "include_role", "import_role"}]
    return keys[0].rsplit(".", 1)[-1] if keys else ""


def _task_files(role: str):
    for sub in ("tasks", "handlers"):
        for path in sorted((ROLES / role / sub).glob("*.yml")):
            yield path, yaml.safe_load(path.read_text())


def _play(tmp_path: Path, role: str, role_vars: dict) -> Path:
    play = {
        "name": f"{role} inputs",
        "hosts": "localhost",
        "connection": "local",
        "gather_facts": False,
        "vars": {"ansible_python_interpreter": sys.executable, "tee_manifest_dir": str(tmp_path / "out")},
        "roles": [{"role": f"confidential.tee.{role}", "vars": role_vars}],
    }
    path = tmp_path / "play.yml"
    path.write_text(json.dumps([play]))
    return path


def _as_string(spec: dict) -> str:
    # Strings that Ansible's own type=list validation accepts (split on commas; key=value for elements: dict).
    return "name=a,vendor=intel" if spec.get("elements") == "dict" else "a,b"


@pytest.mark.slow
@pytest.mark.parametrize("role", ROLES_WITH_LISTS)
def test_a_string_where_a_list_belongs_is_refused_naming_the_variable(tmp_path, ansible_playbook_cli, role):
    lists = _list_options(role)
    proc = ansible_playbook_cli(_play(tmp_path, role, {name: _as_string(spec) for name, spec in lists.items()}))
    assert proc.returncode != 0, proc.stdout[-3000:]
    assert f"Refuse strings where lists belong in {role}" in proc.flat
    for name, spec in lists.items():
        kind = "a list of mappings" if spec.get("elements") == "dict" else "a list"
        assert f"{name} must be {kind}, got the string '{_as_string(spec)}'" in proc.flat, name
    assert not (tmp_path / "out").exists()  # refused before anything was written


@pytest.mark.slow
def test_the_message_names_the_inventory_variable_a_default_reads(tmp_path, ansible_playbook_cli):
    proc = ansible_playbook_cli(_play(tmp_path, "kata_runtimeclasses", {}), "-e", "tee_cluster_nodes=name=tdx-1")
    assert proc.returncode != 0
    assert "kata_runtimeclasses_nodes must be a list of mappings, got the string 'name=tdx-1'" in proc.flat
    assert "kata_runtimeclasses_nodes defaults to tee_cluster_nodes" in proc.flat


@pytest.mark.parametrize("role", ROLES_WITH_LISTS)
def test_every_role_with_lists_checks_them_first_through_the_shared_role(role):
    first = yaml.safe_load((ROLES / role / "tasks" / "main.yml").read_text())[0]
    # A role whose checks live in tasks/request.yml or tasks/check.yml (the entry point a caller runs first, with
    # tasks_from, before any role changes anything) includes that file first; its first task is then the shared check.
    while first.get("ansible.builtin.include_tasks") in ("request.yml", "check.yml"):
        first = yaml.safe_load((ROLES / role / "tasks" / first["ansible.builtin.include_tasks"]).read_text())[0]
    assert first.get("ansible.builtin.include_role", {}).get("name") == SHARED_CHECK, first
    for path, _ in _task_files(role):
        assert "list_errors" not in path.read_text(), f"{path}: the list check lives in roles/role_inputs only"


def test_no_kubernetes_task_chooses_the_api_server_itself():
    files = [path for role in _roles() for path, _ in _task_files(role)] + sorted((REPO / "playbooks").glob("*.yml"))
    for path in files:
        data = yaml.safe_load(path.read_text())
        plays = data if path.parent.name == "playbooks" else [{"tasks": data}]
        for play in plays:
            for section in ("pre_tasks", "tasks", "post_tasks", "handlers"):
                for task in _tasks(play.get(section)):
                    module = next((k for k in task if k.startswith("kubernetes.core.")), None)
                    if module:
                        given = API_ARGUMENTS & set(task[module] or {})
                        assert not given, f"{path} {task.get('name')}: {sorted(given)} belong in module_defaults"


# The tasks that send objects to the API server.
WRITE_MODULES = ("kubernetes.core.k8s", "confidential.tee.tee_cluster_apply")


def test_no_kubernetes_write_can_show_a_secret():
    """A task that sends objects which may hold a Secret is no_log, and loops over nothing it would skip item by item.

    kubernetes.core.k8s returns the object (a Secret's data is only base64) and -v prints it, diff included; a loop
    item that ``when`` skips is printed whole at -v, no_log or not on a sibling task. Tasks that show their output
    loop over the objects without the Secrets (``rejectattr('kind', 'equalto', 'Secret')``).
    """
    writes = 0
    for role in _roles():
        for path, tasks in _task_files(role):
            # Variables (block or task vars) that hold the objects with the Secrets taken out.
            shown = {
                name
                for task in _tasks(tasks)
                for name, value in (task.get("vars") or {}).items()
                if "rejectattr('kind', 'equalto', 'Secret')" in str(value)
            }
            for task in _tasks(tasks):
                module = next((m for m in WRITE_MODULES if m in task), None)
                if module is None:
                    continue
                writes += 1
                # A looped task sends its loop items; tee_cluster_apply sends its objects in one call (no loop).
                sent = str(task.get("loop", "")) or str((task[module] or {}).get("objects", ""))
                without_secrets = "rejectattr('kind', 'equalto', 'Secret')" in sent or any(n in sent for n in shown)
                where = f"{path.relative_to(REPO)}: {task.get('name')}"
                assert without_secrets or task.get("no_log") is True, f"{where}: may send a Secret, so must be no_log"
                assert "when" not in task or "loop" not in task, (
                    f"{where}: a `when` skips item by item and prints each skipped object whole at -v; "
                    "choose the items in `loop` instead"
                )
    assert writes >= 2, "the apply tasks of roles/cluster_objects were not found"


def _set_by(task: dict) -> list[tuple[str, str]]:
    """(how, name) for every variable a task or block sets for its own role."""
    found = []
    if _action(task) == "set_fact":
        args = next(v for k, v in task.items() if k.endswith("set_fact"))
        found += [("set_fact", name) for name in args if name != "cacheable"]
    if isinstance(task.get("register"), str):
        found.append(("register", task["register"]))
    if _action(task) not in {"include_role", "import_role"}:
        found += [("vars", name) for name in task.get("vars") or {}]
    found.append(("loop_var", (task.get("loop_control") or {}).get("loop_var")))
    return [(how, name) for how, name in found if name]


@pytest.mark.parametrize("role", _roles())
def test_role_internal_variables_are_private(role):
    documented = set(_options(role)) | _outputs(role)
    wrong = []
    for path, tasks in _task_files(role):
        for task in _tasks(tasks):
            for how, name in _set_by(task):
                if not name.startswith(f"__{role}_") and name not in documented:
                    wrong.append(f"{path.relative_to(REPO)}: {how} {name} (task {task.get('name')!r})")
            if _action(task) in {"include_role", "import_role"}:
                called = next(v for k, v in task.items() if k.endswith(("include_role", "import_role")))["name"]
                inputs = set(_options(called.rsplit(".", 1)[-1]))
                wrong += [
                    f"{path.relative_to(REPO)}: {name} is no input of {called}"
                    for name in task.get("vars") or {}
                    if name not in inputs
                ]
    role_vars = ROLES / role / "vars" / "main.yml"
    if role_vars.exists():
        wrong += [
            f"vars/main.yml: {name}"
            for name in yaml.safe_load(role_vars.read_text()) or {}
            if not name.startswith(f"__{role}_")
        ]
    assert not wrong, "set a documented input or output, or prefix __" + role + "_:\n" + "\n".join(wrong)


@pytest.mark.parametrize("role", [role for role in _roles() if _outputs(role)])
def test_documented_outputs_are_set_by_the_role(role):
    text = "".join(path.read_text() for path, _ in _task_files(role))
    for name in _outputs(role):
        assert re.search(rf"^\s+{name}:", text, re.M), f"{role} README documents {name}, which no task sets"
