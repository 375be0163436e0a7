"""The built artifact, installed with its declared dependencies, on ansible-core alone, from a directory outside the
checkout: what ships, the shell commands and every YAML example of README.md and docs/, the modules' EXAMPLES, and
nothing written under the installed collection. One build and install per session (conftest.py); the tests run in
file order and the last one compares the installed tree with its state before the first."""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml
from installed_artifact import REPO, Installed, galaxy_dependencies, tree_fingerprint
from installed_examples import Example, markdown_examples, module_examples, named_yaml_blocks, shell_commands

pytestmark = pytest.mark.slow
TEESIM = Path(sys.executable).parent / "teesim"
SECRETS = {
    "vault_pcs_api_key": "0123456789abcdef0123456789abcdef",
    "vault_pccs_user_token": "user-token-for-tests",
    "vault_pccs_admin_token": "admin-token-for-tests",
    "vault_pccs_tls_key": "not a key, a test value",
}
# The documents whose commands a user copies: the README and the task guides.
DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# A documented command that cannot succeed here, and what its failure must tell the user instead (what to set or
# install). Everything else must exit 0.
EXPECTED_FAILURES = {
    r"tee_fleet_kubernetes=api": r"kubernetes|kubeconfig|Kubernetes",
    r"-m confidential\.tee\.tdx_attestation_check": r"FAIL|fix",
    # The chain on a host configures the DCAP release installed there (Intel's packages are unreachable here).
    r"-i inventory confidential\.tee\.attestation": r"cannot tell the DCAP version: tdx-qgs is not installed",
}
# Where the documents' commands read secrets from the user's vault (its attestation.yml says so), a vault file of the
# test's stands in for it.
VAULT_FILE = "vault.yml"


@pytest.fixture(scope="module")
def before(installed: Installed):
    return tree_fingerprint(installed.collections)


@pytest.fixture(scope="module")
def project(tmp_path_factory, installed: Installed) -> Path:
    """An operator's project directory (outside the checkout) with an inventory of simulated nodes and the files
    the documents' commands read; `teesim node build` trees stand in for the nodes, and a `teesim fleet build`
    fleet's Kubernetes objects for the `kubectl get` dump that docs/fleet.md makes."""
    if not TEESIM.exists():
        pytest.skip("teesim is not installed in this virtualenv (make venv installs it)")
    project = tmp_path_factory.mktemp("project")
    nodes = project.parent / f"{project.name}-nodes"
    for name, vendor in (("sim-tdx", "intel"), ("sim-snp", "amd")):
        subprocess.run(
            [
                str(TEESIM),
                "node",
                "build",
                "--out",
                str(nodes / name),
                "--vendor",
                vendor,
                "--name",
                name,
                "--usage",
                "tdx=12" if vendor == "intel" else "sev_es=3",
            ],
            check=True,
            capture_output=True,
        )
    local = {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"}
    inventory = {
        "all": {
            "vars": {**local, **SECRETS},
            "children": {
                "tee_nodes": {
                    "hosts": {
                        "sim-tdx": {"tee_host_root": str(nodes / "sim-tdx")},
                        "sim-snp": {"tee_host_root": str(nodes / "sim-snp")},
                    }
                },
                "tdx_nodes": {"hosts": {"sim-tdx": None}},
            },
        }
    }
    (project / "inventory").write_text(yaml.safe_dump(inventory))
    (project / VAULT_FILE).write_text(yaml.safe_dump(SECRETS))
    for document in DOCUMENTS:
        for name, text in named_yaml_blocks(document).items():
            (project / name).write_text(text)
    fleet = project.parent / f"{project.name}-fleet"
    subprocess.run([str(TEESIM), "fleet", "build", "--out", str(fleet)], check=True, capture_output=True)
    (project / "dump").mkdir()
    for objects in (fleet / "kubernetes").glob("*.json"):
        shutil.copy(objects, project / "dump" / objects.name)
    # Inventories the documents show name real nodes: the project's host_vars (read beside any inventory) make them
    # the simulated ones.
    (project / "host_vars").mkdir()
    for host, tree in (("tdx-1", "sim-tdx"), ("snp-1", "sim-snp")):
        (project / "host_vars" / f"{host}.yml").write_text(
            yaml.safe_dump({**local, "tee_host_root": str(nodes / tree)})
        )
    return project


def test_artifact_ships_what_its_documents_link_to(installed: Installed, before):
    with tarfile.open(installed.tarball) as archive:
        names = set(archive.getnames())
    assert {"LICENSE", "CHANGELOG.rst", "README.md", "meta/runtime.yml"} <= names
    assert "Apache License" in (installed.copy / "LICENSE").read_text()
    broken = []
    for document in [
        installed.copy / "README.md",
        *installed.copy.glob("docs/*.md"),
        *installed.copy.glob("roles/*/README.md"),
    ]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", document.read_text()):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (document.parent / target).exists():
                broken.append(f"{document.relative_to(installed.copy)} -> {target}")
    assert broken == [], "the artifact's documents link to files it does not ship"


def test_declared_dependencies_are_the_collections_the_roles_call(installed: Installed, before):
    used = set()
    for path in [*REPO.glob("roles/**/*.yml"), *REPO.glob("playbooks/**/*.yml")]:
        text = path.read_text()
        # Task keys (modules, actions), module_defaults groups, lookups by name and filters/tests after a pipe.
        used |= set(re.findall(r"^\s*(?:-\s+)?([a-z_]+\.[a-z_]+)\.[a-z_0-9]+:", text, flags=re.M))
        used |= set(re.findall(r"group/([a-z_]+\.[a-z_]+)\.[a-z_0-9]+", text))
        used |= set(re.findall(r"(?:lookup|query)\(\s*'([a-z_]+\.[a-z_]+)\.[a-z_0-9]+'", text))
        used |= set(re.findall(r"(?:\||\bis)\s*([a-z_]+\.[a-z_]+)\.[a-z_0-9]+\b", text))
    used -= {"ansible.builtin", "confidential.tee"}
    assert used == set(galaxy_dependencies()), "galaxy.yml dependencies differ from the FQCNs the roles use"
    listed = installed.run(
        [str(installed.bin / "ansible-galaxy"), "collection", "list", "--format", "json"], REPO.parent
    )
    # ansible-core lists its own internal collections (ansible._protomatter) too.
    found = {name for path in json.loads(listed.stdout).values() for name in path if not name.startswith("ansible.")}
    assert found == {"confidential.tee", *galaxy_dependencies()}


def test_the_action_group_is_every_module_that_takes_host_root(installed: Installed, before):
    group = set(yaml.safe_load((installed.copy / "meta/runtime.yml").read_text())["action_groups"]["tee"])
    with_root = set()
    for module in (installed.copy / "plugins/modules").glob("*.py"):
        doc = next(
            n.value.value
            for n in ast.parse(module.read_text()).body
            if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "DOCUMENTATION"
        )
        if "confidential.tee.host_root" in doc:
            with_root.add(module.stem)
    assert group == with_root


DOCUMENTED_COMMANDS = [
    pytest.param(command, id=f"{document.relative_to(REPO)}: {command}")
    for document in DOCUMENTS
    for command in shell_commands(document)
]


def test_the_documents_show_commands():
    """The parametrized test below must have something to run: the commands moved once and were silently not run."""
    assert len(DOCUMENTED_COMMANDS) >= 10, [param.id for param in DOCUMENTED_COMMANDS]


@pytest.mark.parametrize("command", DOCUMENTED_COMMANDS)
def test_documented_command(installed: Installed, project: Path, before, command: str):
    if "@attestation.yml" in command and " -i " not in command:
        command += f" -e @{VAULT_FILE}"  # no inventory: the secrets come from the user's vault
    completed = installed.run(command, project, timeout=900)
    expected = next((message for pattern, message in EXPECTED_FAILURES.items() if re.search(pattern, command)), None)
    output = completed.stdout[-6000:] + completed.stderr[-3000:]
    if expected is None:
        assert completed.returncode == 0, output
        assert ran_on_the_inventory(command, completed.stdout), f"no inventory host ran it:\n{output}"
    else:
        assert completed.returncode != 0 and re.search(expected, completed.flat), output
    assert "Traceback" not in completed.flat, output


def ran_on_the_inventory(command: str, stdout: str) -> bool:
    """Whether a command given an inventory (``-i``) did its work on one of its hosts, not on none: an ad hoc
    command's output names the host; a playbook's recap lists a host other than localhost (a playbook's optional
    plays, such as the GPU nodes', may match no host)."""
    if " -i " not in f" {command} ":
        return True
    if command.startswith("ansible "):
        return "no hosts matched" not in stdout.lower() and bool(re.search(r"^\S+ \| ", stdout, re.MULTILINE))
    recap = stdout.rpartition("PLAY RECAP")[2]
    hosts = re.findall(r"^(\S+)\s*: ok=", recap, re.MULTILINE)
    return any(host != "localhost" for host in hosts)


def _examples() -> list[Example]:
    return markdown_examples(DOCUMENTS, REPO) + module_examples(REPO / "plugins" / "modules", REPO)


def _as_plays(example: Example, host: str, tree: Path) -> list[dict]:
    # A node root mounted at /host (the DaemonSet form) is the simulated node here.
    text = re.sub(r"(?<![\w/])/host(?=[/\s\"',]|$)", str(tree), example.text, flags=re.M)
    data = yaml.safe_load(text)
    if example.kind == "playbook":
        return [dict(play, hosts=host, tasks=_reported(example, play.get("tasks") or [])) for play in data]
    return [
        {
            "name": example.source,
            "hosts": host,
            "gather_facts": False,
            "module_defaults": {"group/confidential.tee.tee": {"host_root": str(tree)}},
            "tasks": _reported(example, data),
        }
    ]


def _reported(example: Example, tasks: list) -> list:
    """The tasks in a block whose rescue prints the failure: a play whose every host failed would end the whole
    run (Ansible stops when no host is left), so each example ends rescued instead, and the recap says so."""
    failure = (
        "EXAMPLE FAILED: {{ ansible_failed_task.name | default('?') }}: {{ ansible_failed_result.msg | default('') }}"
    )
    return [{"name": example.source, "block": tasks, "rescue": [{"ansible.builtin.debug": {"msg": failure}}]}]


def test_every_example_runs_or_says_why_not(installed: Installed, project: Path, before, tmp_path: Path):
    """All examples in one ansible-playbook run: one play per example on a host of its own (a failure stops only
    that example), each on its own copy of a simulated TDX node."""
    examples = [example for example in _examples() if example.skipped is None]
    assert examples, "no example found"
    plays, hosts = [], {}
    for number, example in enumerate(examples):
        host, tree = f"example-{number}", tmp_path / f"node-{number}"
        shutil.copytree(project.parent / f"{project.name}-nodes" / "sim-tdx", tree, symlinks=True)
        hosts[host] = {"tee_host_root": str(tree)}
        plays += _as_plays(example, host, tree)
    inventory = {
        "all": {
            "vars": {
                "ansible_connection": "local",
                "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                **SECRETS,
            },
            "children": {"tee_nodes": {"hosts": hosts}},
        }
    }
    (tmp_path / "examples.yml").write_text(yaml.safe_dump(plays, sort_keys=False))
    (tmp_path / "examples-inventory.yml").write_text(yaml.safe_dump(inventory))
    completed = installed.run(
        ["ansible-playbook", "-i", str(tmp_path / "examples-inventory.yml"), str(tmp_path / "examples.yml")],
        project,
        timeout=900,
    )
    recap = dict(re.findall(r"^(example-\d+)\s+:\s+(.*)$", completed.stdout, flags=re.M))
    failed = [
        f"{examples[int(h.split('-')[1])].source}: {line}"
        for h, line in recap.items()
        if not re.search(r"failed=0 ", line) or "unreachable=0 " not in line or "rescued=0 " not in line
    ]
    missing = [examples[int(h.split("-")[1])].source for h in hosts if h not in recap]
    assert failed == [] and missing == [], completed.stdout[-8000:]


def test_nothing_was_written_under_the_installed_collection(installed: Installed, before):
    after = tree_fingerprint(installed.collections)
    changed = sorted(set(before) ^ set(after) | {p for p in before.keys() & after.keys() if before[p] != after[p]})
    assert changed == []
