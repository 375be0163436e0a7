"""One timed ``ansible-playbook`` run, the unit every Ansible benchmark here measures.

Imported by the benchmark scripts beside it (Python puts a script's own folder first on ``sys.path``). Wall time is
what people wait for; on a shared machine it moves with the load, so each run also reports the CPU seconds (user +
system) of the whole ``ansible-playbook`` process tree, and, through ``callback_plugins/play_cpu.py``, of each play.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent


@dataclass
class Run:
    wall_s: float
    cpu_s: float
    plays: list[dict] = field(default_factory=list)


def mitogen_strategy_path() -> str | None:
    """The folder of mitogen's strategy plugins, or ``None`` when mitogen is not installed (an optional extra)."""
    try:
        import ansible_mitogen
    except ImportError:
        return None
    return os.path.join(os.path.dirname(ansible_mitogen.__file__), "plugins", "strategy")


def run_playbook(
    inventory: Path,
    playbook: Path,
    forks: int,
    extra: list[str] = (),
    cwd: Path | None = None,
    mitogen: bool = False,
    env: dict[str, str] | None = None,
) -> Run:
    """Wall and CPU seconds of one run with this checkout as confidential.tee; a failed run ends the benchmark.

    ``mitogen``: the ``mitogen_linear`` strategy (the two ``ansible.cfg`` lines of docs/fleet.md, as variables).
    """
    with tempfile.NamedTemporaryFile(prefix="tee-plays-", suffix=".json") as plays_file:
        run_env = dict(
            os.environ,
            ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
            ANSIBLE_COLLECTIONS_PATH=str(REPO / ".build" / "collections"),
            ANSIBLE_FORKS=str(forks),
            ANSIBLE_CALLBACK_PLUGINS=str(HERE / "callback_plugins"),
            ANSIBLE_CALLBACKS_ENABLED="play_cpu",
            TEE_PLAY_CPU_FILE=plays_file.name,
        )
        run_env.update(env or {})
        if mitogen:
            strategies = mitogen_strategy_path()
            if strategies is None:
                sys.exit("mitogen is not installed: pip install 'confidential-tee[mitogen]'")
            run_env.update(ANSIBLE_STRATEGY_PLUGINS=strategies, ANSIBLE_STRATEGY="mitogen_linear")
        command = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory), str(playbook), *extra]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        completed = subprocess.run(command, capture_output=True, text=True, env=run_env, cwd=cwd)
        elapsed = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if completed.returncode != 0:
            sys.exit(f"{playbook.name} failed:\n{completed.stdout[-3000:]}\n{completed.stderr[-3000:]}")
        text = Path(plays_file.name).read_text()
        plays = json.loads(text) if text else []
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return Run(elapsed, cpu, plays)


def time_playbook(inventory: Path, playbook: Path, forks: int, extra: list[str] = (), cwd: Path | None = None) -> float:
    """Wall seconds of one run (see :func:`run_playbook`)."""
    return run_playbook(inventory, playbook, forks, extra, cwd).wall_s
