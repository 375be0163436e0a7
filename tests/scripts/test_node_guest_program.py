"""The real node's guest entrypoint (tools/node/guest, a Go program make node packs into the guest image): its own
Go tests (the retry waits ``teesim run --real-node`` asks for) and ``go vet``, run with the Go on PATH."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

GUEST = Path(__file__).resolve().parents[2] / "tools" / "node" / "guest"


@pytest.mark.slow
def test_the_guest_programs_go_tests_and_vet_pass() -> None:
    if shutil.which("go") is None:
        pytest.skip("no go on PATH: make node builds the guest from Go sources")
    # The module uses the standard library only; GOFLAGS from the caller (say -mod=vendor) would not apply to it.
    env = {**os.environ, "GOFLAGS": ""}
    for command in (["go", "vet", "./..."], ["go", "test", "-count=1", "./..."]):
        done = subprocess.run(command, cwd=GUEST, env=env, capture_output=True, text=True, timeout=900, check=False)
        assert done.returncode == 0, f"{' '.join(command)} in {GUEST}:\n{done.stdout}{done.stderr}"
