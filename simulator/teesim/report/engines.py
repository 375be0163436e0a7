"""Engines that run sweep tasks: this machine's cores (standard library), or a Dask cluster.

Each engine turns ``list[SweepTask]`` into the list of :func:`teesim.report.sweep.run_task` results;
which worker runs which task is the engine's business (no scheduling here beyond handing the
longest tasks over first, so that one of them does not start last and leave the other workers idle).

* ``process``: ``concurrent.futures.ProcessPoolExecutor`` with ``workers`` processes (``fork`` where
  the platform has it: the workers start with teesim already imported, in milliseconds).
* ``dask``: ``Client.map`` on the scheduler at ``address`` (``tcp://host:8786``), or on a
  ``LocalCluster`` of ``workers`` single-threaded processes started here. Optional:
  ``pip install 'confidential-tee[dask]'``.

Dask rather than Ray, on measurements on the 2-vCPU development machine (docs/simulator.md,
"Sweeps"): Dask installs 39 MiB in about 10 s where Ray takes 251 MiB, and a local Dask cluster
starts in about 2 s where Ray's took 7 to 30 s; both add a few milliseconds per task, which is
nothing next to a simulation run.

Workers on other machines need the ``teesim`` package importable (install this project there); a
task carries its scenario as data, so no file has to be shared.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from teesim.report.sweep import Engine, SweepTask, run_serial, run_task

ENGINES = ("serial", "process", "dask")


class EngineUnavailable(ValueError):
    """The engine's package is not installed: a usage error, reported in one line by the CLI."""


def default_workers() -> int:
    """The CPUs this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def _estimated_cost(task: SweepTask) -> float:
    nodes = sum(int(n.get("count", 1)) for n in task.data.get("nodes", []) if isinstance(n, dict))
    return float(task.data.get("duration", 3600)) * max(nodes, 1)


def longest_first(tasks: list[SweepTask]) -> list[SweepTask]:
    return sorted(tasks, key=_estimated_cost, reverse=True)


def process_engine(workers: int) -> Engine:
    def run(tasks: list[SweepTask]) -> list[dict[str, Any]]:
        if workers <= 1 or len(tasks) <= 1:
            return run_serial(tasks)
        methods = multiprocessing.get_all_start_methods()
        context = multiprocessing.get_context("fork" if "fork" in methods else None)
        with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
            return list(pool.map(run_task, longest_first(tasks), chunksize=1))

    return run


def dask_engine(workers: int, address: str | None = None) -> Engine:
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError as exc:
        raise EngineUnavailable(
            "the dask engine needs Dask: pip install 'confidential-tee[dask]' (or pip install 'dask[distributed]')"
        ) from exc

    def run(tasks: list[SweepTask]) -> list[dict[str, Any]]:
        if address is not None:
            with Client(address) as client:
                return client.gather(client.map(run_task, longest_first(tasks), pure=False))
        with (
            LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None) as cluster,
            Client(cluster) as client,
        ):
            return client.gather(client.map(run_task, longest_first(tasks), pure=False))

    return run


def make_engine(name: str, workers: int | None = None, address: str | None = None) -> tuple[Engine, int]:
    """The engine called ``name`` and the number of workers it will use."""
    count = workers if workers is not None else default_workers()
    if count < 1:
        raise ValueError(f"workers must be >= 1, got {count}")
    if address is not None and name != "dask":
        raise ValueError(f"--address is for the dask engine, not {name!r}")
    factories: dict[str, Callable[[], Engine]] = {
        "serial": lambda: run_serial,
        "process": lambda: process_engine(count),
        "dask": lambda: dask_engine(count, address),
    }
    if name not in factories:
        raise ValueError(f"unknown engine {name!r}; choose from {', '.join(ENGINES)}")
    return factories[name](), 1 if name == "serial" else count
