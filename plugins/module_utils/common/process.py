# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""Run a helper program with a time limit, a bounded output and, when asked, a clean environment.

``AnsibleModule.run_command`` has neither a time limit nor an output bound and decodes output itself
(a byte that is not UTF-8 then breaks the module's JSON). Modules that run programs whose output they
parse (``nvidia-smi``) or whose behaviour must not depend on the caller's environment (``/bin/sh``
evaluating GRUB's files) run them through :func:`run_bounded` instead: bytes in, bytes out, decoded by
the caller. Standard library only.
"""

from __future__ import annotations

import os
import selectors
import subprocess
import time
from dataclasses import dataclass

DEFAULT_OUTPUT_LIMIT = 4 * 1024 * 1024
CLEAN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
TIMED_OUT = 124


@dataclass
class Completed:
    """What a bounded run gave: ``rc`` is :data:`TIMED_OUT` when it was killed for time."""

    argv: list[str]
    rc: int
    stdout: bytes
    stderr: bytes
    timed_out: bool = False
    truncated: bool = False


def clean_environment(**extra: str) -> dict[str, str]:
    """The environment of a program that must not see the caller's: PATH and the C locale only."""
    return {"PATH": CLEAN_PATH, "LC_ALL": "C", **extra}


def run_bounded(
    argv: list[str],
    timeout: float,
    *,
    limit: int = DEFAULT_OUTPUT_LIMIT,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
) -> Completed:
    """Run ``argv`` with stdin from /dev/null; kill it after ``timeout`` seconds or ``limit`` output bytes.

    Raises ``OSError`` only when the program cannot be started at all.
    """
    # argv lists only, never a shell string.
    process = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=cwd,
        close_fds=True,
        start_new_session=True,
    )
    buffers = {process.stdout: bytearray(), process.stderr: bytearray()}
    deadline = time.monotonic() + timeout
    timed_out = truncated = False
    with selectors.DefaultSelector() as selector:
        for stream in buffers:
            selector.register(stream, selectors.EVENT_READ)
        while selector.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            for key, _events in selector.select(remaining):
                chunk = os.read(key.fileobj.fileno(), 65536)
                if not chunk:
                    selector.unregister(key.fileobj)
                    continue
                buffers[key.fileobj] += chunk
                if sum(len(buffer) for buffer in buffers.values()) > limit:
                    truncated = True
            if truncated:
                break
    if timed_out or truncated:
        _kill(process)
    rc = process.wait()
    for stream in buffers:
        stream.close()
    out, err = (bytes(buffer[:limit]) for buffer in buffers.values())
    return Completed(list(argv), TIMED_OUT if timed_out else rc, out, err, timed_out, truncated)


def _kill(process: subprocess.Popen) -> None:
    # The whole session: a shell's children (command substitutions) must not outlive it.
    try:
        os.killpg(process.pid, 9)
    except OSError:
        process.kill()
