"""Test-wide fixtures: the shared reference data, and the real command-line tools tests drive."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

REPO_ROOT = Path(__file__).resolve().parents[1]

# Property tests draw the same examples on every run (derandomize), so that a green run here is a green run in
# CI; TEE_HYPOTHESIS=explore draws new ones (and keeps what fails in .hypothesis/) when hunting for bugs.
# Neither profile measures the machine: Hypothesis' 200 ms deadline per example and its too_slow health check
# fail a busy shared two-core CI machine, not the code. A test's own @settings still choose its example count.
ANY_LOAD = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow]}
settings.register_profile("repeatable", derandomize=True, database=None, **ANY_LOAD)
settings.register_profile("explore", **ANY_LOAD)
settings.load_profile("explore" if os.environ.get("TEE_HYPOTHESIS") == "explore" else "repeatable")
BIN = Path(sys.executable).parent


def reference_dir() -> Path | None:
    """``../shared/reference`` beside the checkout (CI and developer machines), if present."""
    candidate = REPO_ROOT.parent / "shared" / "reference"
    return candidate if candidate.is_dir() else None


# Worked outputs in the docs: a fenced block right after ``<!-- output: KEY -->`` shows what a command printed; the
# test named in tests/unit/test_worked_outputs.py runs that command and compares (``worked_output``).
OUTPUT_MARKER = re.compile(r"^<!-- output: (?P<key>[^>]+?) -->\n```[a-z]*\n(?P<body>.*?)^```$", re.M | re.S)
DOC_FILES = ("README.md", "docs/*.md")


def worked_outputs() -> dict[str, tuple[Path, list[str]]]:
    """``{key: (file, lines)}`` of every worked output in README.md and docs/."""
    found: dict[str, tuple[Path, list[str]]] = {}
    for pattern in DOC_FILES:
        for path in sorted(REPO_ROOT.glob(pattern)):
            for match in OUTPUT_MARKER.finditer(path.read_text(encoding="utf-8")):
                assert match["key"] not in found, f"worked output {match['key']!r} twice: {path}"
                found[match["key"]] = (path, match["body"].splitlines())
    return found


def assert_worked_output(key: str, printed: str, replace: dict[str, str] | None = None) -> None:
    """The doc's block for ``key`` is what the command printed: every line of it, in order (a ``...`` line marks
    lines left out), trailing spaces aside; ``replace`` maps what differs by machine (a temporary path) to the
    doc's spelling."""
    path, expected = worked_outputs()[key]
    for old, new in (replace or {}).items():
        printed = printed.replace(old, new)
    actual = [line.rstrip() for line in printed.splitlines()]
    position = 0
    for line in (line.rstrip() for line in expected):
        if line == "...":
            continue
        try:
            position = actual.index(line, position) + 1
        except ValueError:
            pytest.fail(f"{path.name}, worked output {key!r}: the command no longer prints (in this order):\n{line}")


@pytest.fixture(scope="session")
def check_worked_output() -> Callable[..., None]:
    """:func:`assert_worked_output`, for tests that run the command a worked output shows."""
    return assert_worked_output


@pytest.fixture(scope="session")
def docs_worked_outputs() -> dict[str, tuple[Path, list[str]]]:
    return worked_outputs()


@pytest.fixture(scope="session")
def optional_reference() -> Path | None:
    """``../shared/reference`` when present, else ``None`` (for tests that use it where it exists)."""
    return reference_dir()


@pytest.fixture
def reference() -> Path:
    found = reference_dir()
    if found is None:
        pytest.skip("../shared/reference (real CRDs and host captures) is not beside this checkout")
    return found


def _run_ansible_playbook(
    playbook: Path | str,
    *args: str,
    extra_vars: dict[str, object] | None = None,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: int = 300,
) -> subprocess.CompletedProcess[str]:
    """Run the real ansible-playbook with this checkout as confidential.tee; never raises on failure.

    The result gains ``flat``: stdout with whitespace collapsed, since the YAML callback wraps long messages.
    """
    command = [str(BIN / "ansible-playbook"), str(playbook), *args]
    for name, value in (extra_vars or {}).items():
        command += ["-e", f"{name}={value}"]
    full_env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(REPO_ROOT / "ansible.cfg"),
        "ANSIBLE_COLLECTIONS_PATH": str(REPO_ROOT / ".build" / "collections"),
        "ANSIBLE_LOCALHOST_WARNING": "false",
        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false",
        "ANSIBLE_NOCOLOR": "1",
        **(env or {}),
    }
    completed = subprocess.run(
        command, env=full_env, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )
    completed.flat = " ".join(completed.stdout.split())  # type: ignore[attr-defined]
    return completed


def _teesim_node(out: Path, *args: str) -> Path:
    """Write a simulated host tree with the real ``teesim node build`` command."""
    teesim = BIN / "teesim"
    if not teesim.exists():
        pytest.skip("teesim is not installed in this virtualenv (make venv installs it)")
    subprocess.run(
        [str(teesim), "node", "build", "--out", str(out), *args], check=True, capture_output=True, timeout=120
    )
    return out


@pytest.fixture(scope="session")
def ansible_playbook_cli() -> Callable[..., subprocess.CompletedProcess[str]]:
    """``run(playbook, *args, extra_vars=None, env=None, cwd=None, timeout=300)``."""
    return _run_ansible_playbook


@pytest.fixture(scope="session")
def teesim_node() -> Callable[..., Path]:
    """``build(out, *teesim_node_build_args) -> out``."""
    return _teesim_node
