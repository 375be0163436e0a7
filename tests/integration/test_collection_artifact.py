"""The collection as its consumers get it: `ansible-galaxy collection build`, installed into an empty collections
path, and the fleet report run by FQCN from that installed copy (never the checkout's link), plus what
ansible-builder reads from the artifact to build an execution environment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import tomllib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from teesim.fixtures.fleet import build_fleet

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
EE_FILES = ("meta/execution-environment.yml", "requirements.txt", "bindep.txt")
# What only the checkout needs: the simulator, benchmarks, scripts, the upstream checks and the pytest suites (the
# docs ship, the simulator's included: the README links to them). tests/sanity stays: ansible-test's ignore files
# belong to the collection.
DEVELOPMENT_ONLY = ("simulator/", "benchmarks/", "scripts/", "upstream/", "pyproject.toml", "Makefile")


def consumer_env(collections: Path, config: Path) -> dict[str, str]:
    """An operator's environment: only the installed collections path, no trace of this checkout."""
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_") and k != "PYTHONPATH"}
    return {**inherited, "ANSIBLE_CONFIG": str(config), "ANSIBLE_COLLECTIONS_PATH": str(collections)}


def run(command: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    completed = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=300, check=False)
    assert completed.returncode == 0, completed.stdout[-4000:] + completed.stderr[-4000:]
    return completed


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict[str, Path]:
    """The artifact built from this checkout and installed offline into an empty collections path."""
    work = tmp_path_factory.mktemp("artifact")
    collections = work / "collections"
    config = work / "ansible.cfg"
    config.write_text(f"[defaults]\ncollections_path = {collections}\ninterpreter_python = auto_silent\n")
    env = consumer_env(collections, config)
    run([str(BIN / "ansible-galaxy"), "collection", "build", "--output-path", str(work / "dist"), str(REPO)], env, work)
    (tarball,) = (work / "dist").glob("confidential-tee-*.tar.gz")
    install = [str(BIN / "ansible-galaxy"), "collection", "install", "--offline", "--no-deps", "-p", str(collections)]
    run([*install, str(tarball)], env, work)
    return {
        "work": work,
        "tarball": tarball,
        "collections": collections,
        "copy": collections / "ansible_collections" / "confidential" / "tee",
        "config": config,
    }


@pytest.mark.slow
def test_artifact_carries_what_ansible_builder_reads_and_nothing_of_the_checkout(installed):
    with tarfile.open(installed["tarball"]) as archive:
        names = archive.getnames()
    assert set(EE_FILES) <= set(names)
    leaked = [n for n in names if n.startswith(DEVELOPMENT_ONLY) or (n.startswith("tests/") and n != "tests/")]
    assert [n for n in leaked if not n.startswith("tests/sanity")] == []
    assert not [n for n in names if "teesim" in n or "conftest" in n]
    metadata = yaml.safe_load((installed["copy"] / "meta" / "execution-environment.yml").read_text())
    # ansible-builder resolves both paths against the installed collection's root.
    for kind in ("python", "system"):
        assert (installed["copy"] / metadata["dependencies"][kind]).is_file()


@pytest.mark.slow
def test_fleet_report_runs_from_the_installed_copy(installed, ansible_playbook_cli):
    fleet = build_fleet(installed["work"] / "fleet")
    out, report_dir = installed["work"] / "fleet", installed["work"] / "report"
    env = consumer_env(installed["collections"], installed["config"])
    doc = run([str(BIN / "ansible-doc"), "--json", "-t", "module", "confidential.tee.tee_fleet_report"], env, out)
    module_file = Path(json.loads(doc.stdout)["confidential.tee.tee_fleet_report"]["doc"]["filename"])
    assert module_file.is_relative_to(installed["copy"]), module_file
    listed = run([str(BIN / "ansible-galaxy"), "collection", "list", "confidential.tee", "--format", "json"], env, out)
    assert list(json.loads(listed.stdout)) == [str(installed["collections"] / "ansible_collections")]

    extra = {"tee_fleet_kubernetes_dir": out / "kubernetes", "tee_fleet_report_dir": report_dir}
    completed = ansible_playbook_cli(
        "confidential.tee.fleet_report",
        *("-i", str(out / "inventory.yml")),
        extra_vars=extra,
        env={**env, "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json"},
        cwd=installed["work"],
    )
    assert completed.returncode == 0, completed.stdout[-4000:] + completed.stderr[-4000:]
    played = {Path(play["play"]["path"].rsplit(":", 1)[0]) for play in json.loads(completed.stdout)["plays"]}
    # The fleet playbook and the inventory check every playbook imports first.
    playbooks = installed["copy"] / "playbooks"
    assert played == {playbooks / "fleet_report.yml", playbooks / "checks" / "inventory.yml"}

    for name in ("report.html", "report.md", "report.json", "tee-fleet.prom"):
        assert (report_dir / name).is_file(), name
    report = json.loads((report_dir / "report.json").read_text())
    assert sorted(node["name"] for node in report["nodes"]) == fleet["nodes"]
    findings = report["summary"]["findings_by_id"]
    assert findings["double_pool"] == 1 and findings["external_usage"] == 1
    assert {"stale_advertiser", "nfd_sev_prefix", "runtimeclass_unadvertised", "sev_es_uncounted"} <= set(findings)
    assert "tdx-nomisc" in report["summary"]["not_ready"]


def _pyproject_requirements() -> dict[str, Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    listed = project["dependencies"] + [r for extra in project["optional-dependencies"].values() for r in extra]
    return {Requirement(line).name.lower(): Requirement(line) for line in listed}


def test_execution_environment_requirements_agree_with_pyproject_and_the_tested_environment():
    """requirements.txt is what an execution environment installs: the same floors as pyproject.toml, and the
    environment these tests ran in satisfies it (so the API paths were tested against what it allows)."""
    lines = [line.split("#")[0].strip() for line in (REPO / "requirements.txt").read_text().splitlines()]
    shipped = [Requirement(line) for line in lines if line]
    assert shipped
    pyproject = _pyproject_requirements()
    for requirement in shipped:
        floors = {s.version for s in requirement.specifier if s.operator == ">="}
        assert floors and all(s.operator == ">=" for s in requirement.specifier), requirement
        if requirement.name.lower() in pyproject:
            dev_floors = {s.version for s in pyproject[requirement.name.lower()].specifier if s.operator == ">="}
            assert floors == dev_floors, (requirement, pyproject[requirement.name.lower()])
        try:
            assert requirement.specifier.contains(version(requirement.name)), requirement
        except PackageNotFoundError:
            pytest.fail(f"{requirement.name} is in requirements.txt but not installed here")
