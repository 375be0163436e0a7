"""The installed artifact, shared by every test here: built and installed once per session (installed_artifact.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

# The helpers beside this file are imported by name (pytest's importlib mode makes no package of tests/).
sys.path.insert(0, str(Path(__file__).parent))

from installed_artifact import (
    REPO,
    Installed,
    bundled_collection,
    core_only_venv,
    galaxy_dependencies,
)


@pytest.fixture(scope="session")
def installed(tmp_path_factory) -> Installed:
    """Build, install with the declared dependencies into an empty path, on an ansible-core-only virtualenv."""
    work = tmp_path_factory.mktemp("installed")
    venv = core_only_venv()
    collections = work / "collections"
    config = work / "ansible.cfg"
    config.write_text(
        f"[defaults]\ncollections_path = {collections}\ninterpreter_python = auto_silent\n"
        "callback_result_format = yaml\n"
    )
    dist = work / "dist"
    dist.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env["ANSIBLE_CONFIG"] = str(config)
    galaxy = str(venv / "bin" / "ansible-galaxy")
    subprocess.run(
        [galaxy, "collection", "build", "--output-path", str(dist), str(REPO)],
        env=env,
        check=True,
        capture_output=True,
        timeout=300,
    )
    (tarball,) = dist.glob("confidential-tee-*.tar.gz")
    dependencies = [bundled_collection(fqcn) for fqcn in galaxy_dependencies()]
    # No --no-deps: ansible-galaxy resolves galaxy.yml's dependencies against the artifacts given.
    completed = subprocess.run(
        [galaxy, "collection", "install", "--offline", "-p", str(collections), str(tarball), *map(str, dependencies)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    return Installed(
        work=work,
        tarball=tarball,
        collections=collections,
        copy=collections / "ansible_collections" / "confidential" / "tee",
        venv=venv,
        config=config,
    )
