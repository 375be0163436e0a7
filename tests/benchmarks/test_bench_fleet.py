"""benchmarks/bench_fleet.py and profile_host_info.py run end to end on a tiny fleet and print every figure they
promise (they assert nothing themselves, so a broken benchmark would otherwise go unnoticed until someone needs it).
No figure's value is checked: they measure the machine."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
HAS_MITOGEN = importlib.util.find_spec("ansible_mitogen") is not None


def run(script: str, *args: str) -> str:
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    return subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
        env=env,
        cwd=BENCHMARKS,
    ).stdout


@pytest.mark.slow
def test_bench_fleet_prints_both_strategies_and_the_controllers_share():
    out = run("bench_fleet.py", "--hosts", "5", "--scale-hosts", "10", "--repeat", "1")
    lines = out.splitlines()
    assert lines[0].startswith("5 simulated hosts, forks=16, median of 1 runs") and "load average" in lines[0]
    for name in ("ping", "per-host", "fleet"):
        assert sum(line.lstrip().startswith(name + " ") for line in lines) == (2 if HAS_MITOGEN else 1), name
    assert any(line.startswith("  controller's part (plays 2 and 3):") for line in lines)
    if HAS_MITOGEN:
        assert any("mitogen ping" in line and "linear ping" in line for line in lines)
    else:
        assert any(line.startswith("mitogen: not installed") for line in lines)
    assert any(line.startswith("     5 hosts:") for line in lines) and any("10 hosts:" in line for line in lines)
    assert any(line.startswith("  each of the 5 extra hosts:") for line in lines)


@pytest.mark.slow
def test_profile_host_info_prints_imports_calls_and_the_collection_listing():
    out = run("profile_host_info.py", "--repeat", "1")
    assert "+ tee_host_info and its module_utils from source" in out
    assert "vanilla host side, the AnsiballZ payloads run again" in out
    for kind in ("snp-1", "tdx-1", "tdx-2", "tdx-nomisc", "tdx-old"):
        assert any(line.lstrip().startswith(kind + " ") and "with result: fleet" in line for line in out.splitlines())
    assert "collections_scan_sys_path = False" in out
