"""Put on PYTHONPATH for one run of test_core_matrix.py: every Ansible worker stays half a second in the result
queue's ``put`` after its result is written. That is the window in which ansible-core ends a play and terminates the
workers that have not exited yet (``TaskQueueManager._cleanup_processes``, ``WORKER_SHUTDOWN_POLL_COUNT`` 0 by
default); on a busy machine a worker is there by chance. ansible-core 2.19.0 to 2.19.3 run a handler the worker
inherited from the parent there, which raises, and the worker sends its result a second time: the next play's results
thread dies with ``KeyError`` and the run hangs (issue 43). From 2.19.4 the worker just ends."""

from __future__ import annotations

import multiprocessing
import multiprocessing.queues
import time
from multiprocessing.reduction import ForkingPickler


def _put_then_linger(self, obj):
    data = ForkingPickler.dumps(obj)
    with self._wlock:  # what SimpleQueue.put does (CPython 3.11 to 3.14)
        self._writer.send_bytes(data)
    if multiprocessing.parent_process() is not None:  # a worker, not ansible-playbook itself
        time.sleep(0.5)


multiprocessing.queues.SimpleQueue.put = _put_then_linger
