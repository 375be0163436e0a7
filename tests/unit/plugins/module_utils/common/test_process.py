"""process.run_bounded: time limit, output bound, clean environment, bytes out."""

from __future__ import annotations

import sys
import time

from ansible_collections.confidential.tee.plugins.module_utils.common.process import (
    TIMED_OUT,
    clean_environment,
    run_bounded,
)


def test_output_is_bytes_even_when_it_is_not_utf8():
    done = run_bounded([sys.executable, "-c", "import sys; sys.stdout.buffer.write(b'caf\\xe9')"], 10)
    assert done.rc == 0 and done.stdout == b"caf\xe9" and not done.timed_out


def test_time_limit_kills_the_whole_session():
    start = time.monotonic()
    done = run_bounded(["/bin/sh", "-c", "sleep 30 & sleep 30"], 0.5)
    assert done.timed_out and done.rc == TIMED_OUT
    assert time.monotonic() - start < 10


def test_output_is_bounded():
    done = run_bounded(["/bin/sh", "-c", "yes"], 20, limit=1000)
    assert done.truncated and len(done.stdout) <= 1000


def test_clean_environment_hides_the_callers():
    done = run_bounded(["/bin/sh", "-c", "env"], 10, env=clean_environment())
    names = {line.split("=", 1)[0] for line in done.stdout.decode().splitlines()}
    assert names <= {"PATH", "LC_ALL", "PWD", "SHLVL", "_"}
