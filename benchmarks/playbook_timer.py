"""One timed ``ansible-playbook`` run, the unit every Ansible benchmark here measures.

Imported by the benchmark scripts beside it (Python puts a script's own folder first on ``sys.path``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def time_playbook(inventory: Path, playbook: Path, forks: int, extra: list[str] = (), cwd: Path | None = None) -> float:
    """Wall seconds of one run with this checkout as confidential.tee; a failed run ends the benchmark."""
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=str(REPO / ".build" / "collections"),
        ANSIBLE_FORKS=str(forks),
    )
    command = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory), str(playbook), *extra]
    start = time.perf_counter()
    completed = subprocess.run(command, capture_output=True, text=True, env=env, cwd=cwd)
    elapsed = time.perf_counter() - start
    if completed.returncode != 0:
        sys.exit(f"{playbook.name} failed:\n{completed.stdout[-3000:]}\n{completed.stderr[-3000:]}")
    return elapsed
