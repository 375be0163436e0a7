"""The installed artifact on every ansible-core and controller Python it claims: the oldest ansible-core that
``meta/runtime.yml``'s ``requires_ansible`` admits and the newest release tested, each on the oldest and newest Python
that release supports (its PyPI classifiers). Each cell is a virtualenv of ansible-core alone from PyPI, cached under
``~/.cache/confidential-tee/`` by both versions (installed_artifact.core_only_venv); a Python that is not installed
skips its cell. Each cell runs ``confidential.tee.cluster`` three times, all cells' runs in parallel: without
``tee_output`` and without a kubeconfig (it must refuse naming ``tee_output``), rendering manifests (every cell must
write the same files, byte for byte), and with an empty node group while every worker lingers after sending its
result (slow_worker_exit/sitecustomize.py): the race that made ansible-core 2.19.0 to 2.19.3 die with ``KeyError`` in
the results thread and hang (issue 43), made certain; the oldest claimed release must refuse cleanly. A run that does
not end within its timeout is killed and fails its cell: a hang is a failure, never a stuck suite."""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import shutil
import signal
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml
from installed_artifact import REPO, Installed, core_only_venv, python_version

pytestmark = pytest.mark.slow

# The newest ansible-core release tested; the oldest is requires_ansible's minimum (one home: meta/runtime.yml).
NEWEST_CORE = "2.21.5"
# Controller Pythons per ansible-core minor release, oldest first, from each release's PyPI classifiers and
# Requires-Python (ansible-core 2.19.4: >=3.11, classifiers 3.11 to 3.13; 2.21.5: >=3.12, classifiers 3.12 to 3.14).
CONTROLLER_PYTHONS = {"2.19": ["3.11", "3.12", "3.13"], "2.21": ["3.12", "3.13", "3.14"]}
# Generous: a cluster run takes 10 to 30 CPU-s, and all cells run at once on a machine that may be busy. Only a run
# that hangs (the failure this file guards against) comes near it.
RUN_TIMEOUT = 1200
# The lingering run stops in the second play (4 tasks, half a second more per worker): 6 s on a quiet machine.
LINGER_TIMEOUT = 600
SLOW_WORKER_EXIT = Path(__file__).parent / "slow_worker_exit"
INVENTORY = {
    "all": {
        "vars": {
            "ansible_connection": "local",
            "ansible_python_interpreter": "{{ ansible_playbook_python }}",
            "tee_cluster_gather_host_facts": False,
        },
        "children": {
            "tee_nodes": {
                "hosts": {
                    "tdx-1": {"tee_cpu_vendor": "intel", "tee_node_consumers": ["kata", "kubevirt"]},
                    "snp-1": {"tee_cpu_vendor": "amd", "tee_node_consumers": ["kata"]},
                }
            }
        },
    }
}


def oldest_core() -> str:
    """The minimum of ``requires_ansible`` (``>=X.Y.Z``, the only form this collection uses)."""
    requires = yaml.safe_load((REPO / "meta" / "runtime.yml").read_text())["requires_ansible"]
    found = re.fullmatch(r">=\s*(\d+\.\d+\.\d+)", requires)
    assert found, f"meta/runtime.yml: requires_ansible {requires!r} is not '>=X.Y.Z'"
    return found.group(1)


@dataclasses.dataclass(frozen=True)
class Cell:
    core: str
    python: str  # X.Y

    def __str__(self) -> str:
        return f"ansible-core {self.core} on Python {self.python}"


def matrix() -> list[Cell]:
    """Each claimed ansible-core on the oldest and the newest Python it supports; where the newest is not installed
    here (its cell skips), the newest that is stands in beside it."""
    cells = []
    for core in (oldest_core(), NEWEST_CORE):
        supported = CONTROLLER_PYTHONS[".".join(core.split(".")[:2])]
        wanted = [supported[0], supported[-1]]
        if not find_python(supported[-1]):
            wanted[1:1] = [python for python in supported[1:-1] if find_python(python)][-1:]
        cells += [Cell(core, python) for python in wanted]
    return cells


@functools.cache
def find_python(wanted: str) -> str | None:
    """An interpreter of Python ``wanted`` (X.Y): pyenv's versions first (its shims answer only for the selected
    versions), then ``pythonX.Y`` on PATH; each checked by running it."""
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    candidates = [str(path) for path in sorted(pyenv.glob(f"{wanted}.*/bin/python{wanted}"), reverse=True)]
    candidates += [found] if (found := shutil.which(f"python{wanted}")) else []
    for candidate in candidates:
        try:
            if python_version(candidate) == wanted:
                return candidate
        except (OSError, subprocess.CalledProcessError):
            continue
    return None


@dataclasses.dataclass
class Run:
    returncode: int | None  # None: killed after timeout seconds
    output: str
    workdir: Path
    timeout: int


def run_cluster(
    installed: Installed, workdir: Path, variables: dict[str, str], timeout: int = RUN_TIMEOUT, **extra_env: str
) -> Run:
    """``ansible-playbook -i inventory.yml confidential.tee.cluster`` from ``workdir`` as an operator runs it, its
    output in a file (a pipe could be held open by a stray worker), in its own session so that a hang is killed
    whole."""
    workdir.mkdir(parents=True)
    (workdir / "inventory.yml").write_text(yaml.safe_dump(INVENTORY))
    env = installed.env(KUBECONFIG=str(workdir / "no-kubeconfig"), **extra_env)
    for name in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):  # no in-cluster configuration either
        env.pop(name, None)
    extra = [arg for name, value in variables.items() for arg in ("-e", f"{name}={value}")]
    log = workdir / "output.txt"
    with log.open("w") as output:
        process = subprocess.Popen(
            ["ansible-playbook", "-i", "inventory.yml", "confidential.tee.cluster", *extra],
            cwd=workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            returncode = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            returncode = None
    return Run(returncode, log.read_text(), workdir, timeout)


@dataclasses.dataclass
class CellRuns:
    venv: Path
    refuse: Run
    manifests: Run
    linger: Run


@pytest.fixture(scope="module")
def cell_runs(installed: Installed, tmp_path_factory) -> dict[Cell, CellRuns]:
    """Every runnable cell's two runs: the virtualenvs made (or found in the cache) in parallel, then all runs."""
    runnable = [cell for cell in matrix() if find_python(cell.python)]
    with ThreadPoolExecutor(max_workers=max(len(runnable), 1)) as pool:
        venvs = list(pool.map(lambda cell: core_only_venv(cell.core, find_python(cell.python)), runnable))
    base = tmp_path_factory.mktemp("core-matrix")
    with ThreadPoolExecutor(max_workers=4) as pool:
        jobs = {}
        for cell, venv in zip(runnable, venvs, strict=True):
            on_cell = dataclasses.replace(installed, venv=venv)
            where = base / f"{cell.core}-py{cell.python}"
            jobs[cell] = (
                venv,
                pool.submit(run_cluster, on_cell, where / "refuse", {}),
                pool.submit(run_cluster, on_cell, where / "manifests", {"tee_output": "manifests"}),
                pool.submit(
                    run_cluster,
                    on_cell,
                    where / "linger",
                    {"tee_cluster_group": "no_such_group"},
                    LINGER_TIMEOUT,
                    PYTHONPATH=str(SLOW_WORKER_EXIT),
                ),
            )
        return {cell: CellRuns(venv, *(job.result() for job in runs)) for cell, (venv, *runs) in jobs.items()}


def runs_of(cell_runs: dict[Cell, CellRuns], cell: Cell) -> CellRuns:
    if cell not in cell_runs:
        pytest.skip(
            f"{cell}: no Python {cell.python} here (pyenv install {cell.python}, or python{cell.python} on PATH)"
        )
    return cell_runs[cell]


def describe(run: Run) -> str:
    ended = f"rc {run.returncode}" if run.returncode is not None else f"killed after {run.timeout} s (hung)"
    return f"{ended}, in {run.workdir}:\n{run.output[-4000:]}"


def assert_clean(run: Run, cell: Cell) -> None:
    """No crash inside Ansible and no warning that the collection does not support this ansible-core."""
    assert run.returncode is not None, f"{cell}: {describe(run)}"
    for sign in ("Traceback (most recent call last)", "Unexpected Exception", "does not support Ansible version"):
        assert sign not in run.output, f"{cell}: {sign!r} in the output, {describe(run)}"


@pytest.mark.parametrize("cell", matrix(), ids=str)
def test_cell_runs_the_claimed_ansible_core_and_python(cell_runs, cell: Cell):
    venv = runs_of(cell_runs, cell).venv
    reported = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import sys, ansible.release as r; print(r.__version__, *sys.version_info[:2])",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert reported == [cell.core, *cell.python.split(".")]


@pytest.mark.parametrize("cell", matrix(), ids=str)
def test_cluster_without_tee_output_or_kubeconfig_refuses_naming_tee_output(cell_runs, cell: Cell):
    run = runs_of(cell_runs, cell).refuse
    assert_clean(run, cell)
    assert run.returncode == 2, f"{cell}: {describe(run)}"
    assert "tee_output is apply (the default), but no kubeconfig" in run.output, f"{cell}: {describe(run)}"


@pytest.mark.parametrize("cell", matrix(), ids=str)
def test_cluster_writes_manifests(cell_runs, cell: Cell):
    run = runs_of(cell_runs, cell).manifests
    assert_clean(run, cell)
    assert run.returncode == 0, f"{cell}: {describe(run)}"
    written = sorted(path.name for path in (run.workdir / "manifests").iterdir())
    assert any(name.endswith("-nodefeaturerule-confidential-tee-keys.yaml") for name in written), written


def test_every_cell_writes_the_same_manifests(cell_runs):
    trees = {}
    for cell, runs in cell_runs.items():
        if runs.manifests.returncode != 0:
            continue  # failed: its own test says so
        directory = runs.manifests.workdir / "manifests"
        trees[cell] = {path.name: path.read_bytes() for path in sorted(directory.iterdir())}
    if len(trees) < 2:
        pytest.skip("fewer than two cells wrote manifests here")
    (first, expected), *others = trees.items()
    for cell, tree in others:
        assert tree == expected, f"{cell} wrote other manifests than {first}"


def test_readme_states_the_minimum_and_the_matrix():
    """Users read the minimum and the tested releases in the README: it names the ones this file runs."""
    readme = " ".join((REPO / "README.md").read_text().split())
    assert f"ansible-core {oldest_core()} or later" in readme
    assert f"on ansible-core {oldest_core()} with Python" in readme
    assert f"on {NEWEST_CORE} with Python" in readme


@pytest.mark.parametrize("cell", matrix(), ids=str)
def test_worker_lingering_after_its_result_does_not_hang_the_run(cell_runs, cell: Cell):
    run = runs_of(cell_runs, cell).linger
    assert_clean(run, cell)
    assert run.returncode == 2, f"{cell}: {describe(run)}"
    assert "the node group (tee_cluster_group, default tee_nodes) must list at least one node" in run.output, (
        f"{cell}: {describe(run)}"
    )
