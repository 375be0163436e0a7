"""scripts/gpu_probe.sh end to end, with a fake nvidia-smi (synthetic output) and a small host tree."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_probe.sh"

FAKE_NVIDIA_SMI = r"""#!/bin/bash
case "$*" in
  "conf-compute -q") printf '\n==============NVSMI CONF-COMPUTE LOG==============\n\n    CC State    : ON\n'
                     printf '    GPU CC Capabilities : CC Capable\n    CC GPUs Ready State : Not Ready\n' ;;
  "conf-compute -f") echo "CC status: ON" ;;
  "conf-compute -grs") sleep "${FAKE_SMI_SLEEP:-0}"; echo "Confidential Compute GPUs Ready state: ready" ;;
  "-q") printf 'Driver Version : 575.0\nAttached GPUs : %s\nGPU 00000000:41:00.0\n    Product Name : Fake\n' \
              "${FAKE_SMI_ATTACHED:-1}" ;;
  *) echo "unexpected arguments: $*" >&2; exit 2 ;;
esac
"""


@pytest.fixture
def env(tmp_path):
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    smi = fake_bin / "nvidia-smi"
    smi.write_text(FAKE_NVIDIA_SMI)
    smi.chmod(0o755)
    root = tmp_path / "host"
    (root / "proc").mkdir(parents=True)
    cpuinfo = "processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu sev sev_es\n"
    (root / "proc/cpuinfo").write_text(cpuinfo)
    (root / "proc/cmdline").write_text("ro\n")
    (root / "proc/version").write_text("Linux version 6.12.0 (x@y) #1\n")
    # python3 from the interpreter running the tests: pyenv shims are not reliable here.
    return {"PATH": f"{fake_bin}:{Path(sys.executable).parent}:/usr/bin:/bin", "HOST_ROOT": str(root)}


def probe(env, *args, **extra):
    done = subprocess.run(
        ["bash", str(SCRIPT), *args], env=dict(env, **extra), capture_output=True, text=True, timeout=60, check=False
    )
    return done, json.loads(done.stdout)


def test_probe_parses_live_style_output_and_saves_raw(env, tmp_path):
    done, facts = probe(env, str(tmp_path / "raw"))
    assert done.returncode == 0, done.stderr
    gpu = facts["gpu"]
    assert gpu["cc_state"] == "ON" and gpu["cc_capable"] is True
    assert gpu["ready_state"] == "ready" and gpu["ready"] is True  # -grs is newer than -q's line
    assert gpu["driver_version"] == "575.0" and [entry["name"] for entry in gpu["gpus"]] == ["Fake"]
    assert facts["cpu"]["flags"]["sev_es"] is True and facts["kernel"]["release"] == "6.12.0"
    assert (tmp_path / "raw" / "nvidia-smi_conf-compute_grs.out").read_text().startswith("Confidential")
    assert (tmp_path / "raw" / "nvidia-smi_q.rc").read_text() == "0\n"
    assert "gpu_probe: nvidia-smi=" in done.stderr and "SELF-CHECK" not in done.stderr


def test_probe_self_check_catches_a_gpu_count_mismatch(env):
    done = probe(env, FAKE_SMI_ATTACHED="2")[0]
    assert done.returncode == 1
    assert "SELF-CHECK FAILED: nvidia-smi -q says 2 GPUs, parser found 1" in done.stderr


def test_probe_times_out_a_hanging_command(env):
    done, facts = probe(env, FAKE_SMI_SLEEP="5", GPU_TIMEOUT="1")
    assert done.returncode == 0
    assert {
        "path": facts["gpu"]["nvidia_smi"] + " conf-compute -grs",
        "problem": "timed out: killed after gpu_timeout seconds without finishing",
        "line_number": None,
        "line": None,
    } in facts["warnings"]
    assert facts["gpu"]["ready_state"] == "not-ready"  # falls back to conf-compute -q's answer


def test_probe_without_nvidia_smi_still_reports_the_host(env, tmp_path):
    (tmp_path / "bin" / "nvidia-smi").unlink()
    done, facts = probe(env)
    assert done.returncode == 2
    assert facts["gpu"]["probed"] is False
    assert facts["gpu"]["reasons"] == ["nvidia-smi not found on PATH (set NVIDIA_SMI)"]
    assert facts["sev"]["supported"] is True
