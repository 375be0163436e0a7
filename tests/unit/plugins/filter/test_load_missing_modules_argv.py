"""confidential.tee.load_missing_modules_argv: the vsock and iommu_passthrough roles' one-task module load.

The argv is run here by the real /bin/sh against this machine's /sys/module (``kernel`` always has a directory
there), with a stand-in ``modprobe`` first on PATH that records its arguments.
"""

from __future__ import annotations

import os
import subprocess

import pytest

PRESENT = "kernel"
MISSING = ("tee_no_such_module", "tee-$(touch pwned)")


@pytest.fixture
def argv(call_filter):
    return lambda *args: call_filter("kernel_modules", "load_missing_modules_argv", *args)


@pytest.fixture
def run(tmp_path):
    recorded = tmp_path / "modprobe.args"
    stand_in = tmp_path / "bin" / "modprobe"
    stand_in.parent.mkdir()
    stand_in.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {recorded}\n')
    stand_in.chmod(0o755)

    def call(command: list[str]) -> tuple[str, list[str] | None]:
        env = {"PATH": f"{stand_in.parent}:{os.environ['PATH']}"}
        done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, check=True, timeout=30)
        return done.stdout, recorded.read_text().splitlines() if recorded.exists() else None

    return call


def test_only_the_missing_modules_are_loaded_and_named(argv, run, tmp_path):
    stdout, modprobe = run(argv([PRESENT, *MISSING])["value"])
    assert stdout == f"missing: {' '.join(MISSING)}\n"
    assert modprobe == ["-a", "--", *MISSING]
    assert not (tmp_path / "pwned").exists(), "a module name is an argument, never shell text"


def test_check_mode_names_them_and_loads_nothing(argv, run):
    stdout, modprobe = run(argv([PRESENT, MISSING[0]], True)["value"])
    assert stdout == f"missing: {MISSING[0]}\n"
    assert modprobe is None


def test_nothing_missing_says_nothing(argv, run):
    assert run(argv([PRESENT])["value"]) == ("", None)


def test_a_string_is_refused(argv):
    assert "load_missing_modules_argv" in argv("vsock,vhost_vsock")["filter_error"]
