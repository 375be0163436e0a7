"""What `make demo` and `make fleet-report` share: the checkout's paths, Ansible's environment, one step at a time.

Imported by the scripts beside it (Python puts a script's own folder first on ``sys.path``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def step(title: str) -> None:
    print(f"\n=== {title} ===", flush=True)


def run(command: list[object], env: dict[str, str] | None = None) -> None:
    """Echo a command, then run it from the checkout; a failure raises CalledProcessError."""
    print("$ " + " ".join(str(part) for part in command), flush=True)
    subprocess.run([str(part) for part in command], check=True, cwd=REPO, env=env)


def ansible_env() -> dict[str, str]:
    """This checkout as the collection confidential.tee (make links it under .build), with plain output."""
    env = dict(os.environ)
    env.setdefault("ANSIBLE_CONFIG", str(REPO / "ansible.cfg"))
    env.setdefault("ANSIBLE_COLLECTIONS_PATH", str(REPO / ".build" / "collections"))
    env.setdefault("ANSIBLE_FORCE_COLOR", "0")
    return env


def shown(path: Path) -> Path:
    """``path`` relative to where the user runs the script when it is below it (shorter, and true there)."""
    try:
        return path.relative_to(Path(os.getcwd()).resolve())
    except ValueError:
        return path


def exit_with(main: Callable[[], int], name: str) -> None:
    """Run ``main``; a failed step ends the script with one line naming it instead of a traceback."""
    try:
        sys.exit(main())
    except subprocess.CalledProcessError as error:
        print(f"{name}: step failed with exit code {error.returncode}: {error.cmd}", file=sys.stderr)
        sys.exit(error.returncode or 1)
