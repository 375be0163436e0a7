"""The upstream checks' fixture: skip where they cannot run."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest


@pytest.fixture(scope="session")
def upstream_runnable() -> None:
    """Skip where the checks cannot run: no Go (CI always has it), or no private mount namespace."""
    if shutil.which("go") is None:
        pytest.skip("no go on PATH: the upstream programs are built from the Go module proxy")
    probe = ["unshare", "--mount", "--propagation", "private", "true"]
    if os.getuid() != 0:
        probe.insert(1, "--map-root-user")
    if shutil.which("unshare") is None or subprocess.run(probe, capture_output=True, check=False).returncode:
        pytest.skip("no private mount namespace here (unshare --mount refused)")
