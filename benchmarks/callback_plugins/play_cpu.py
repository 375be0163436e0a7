# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""Benchmark helper, never shipped in the collection: wall and CPU seconds of every play of one run.

Enabled by benchmarks/playbook_timer.py only (ANSIBLE_CALLBACK_PLUGINS, ANSIBLE_CALLBACKS_ENABLED=play_cpu), it
writes ``[{"play", "wall_s", "cpu_s"}, ...]`` as JSON to the file named by ``TEE_PLAY_CPU_FILE``. CPU is the
controller process's own time plus that of the children it has reaped: under the default strategy every task's
worker (and, with a local connection, the module's interpreter); under mitogen the connection multiplexer and its
interpreters are reaped only at the end of the run, so there only the wall time of a play is meaningful.
"""

from __future__ import annotations

import json
import os
import resource
import time

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: play_cpu
type: aggregate
short_description: wall and CPU seconds per play, for the benchmarks
description: Writes the wall and CPU seconds of every play to the file named by TEE_PLAY_CPU_FILE.
requirements: [enable in the callbacks_enabled setting]
"""


def _cpu() -> float:
    own, reaped = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "play_cpu"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        self._plays: list[dict] = []
        self._open: tuple[str, float, float] | None = None

    def _close(self) -> None:
        if self._open is not None:
            name, wall, cpu = self._open
            self._plays.append({"play": name, "wall_s": time.perf_counter() - wall, "cpu_s": _cpu() - cpu})
            self._open = None

    def v2_playbook_on_play_start(self, play) -> None:
        self._close()
        self._open = (play.get_name(), time.perf_counter(), _cpu())

    def v2_playbook_on_stats(self, stats) -> None:
        self._close()
        path = os.environ.get("TEE_PLAY_CPU_FILE")
        if path:
            with open(path, "w", encoding="utf-8") as handle:
                json.dump(self._plays, handle)
