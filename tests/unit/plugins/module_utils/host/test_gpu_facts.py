"""gpu_facts: the real H100 capture, synthetic nvidia-smi output (CC on, DevTools, broken), fuzzing."""

from __future__ import annotations

import re

from ansible_collections.confidential.tee.plugins.module_utils.host import gpu_facts as gf
from hypothesis import given, settings
from hypothesis import strategies as st
from teesim.fixtures.capture import BUNDLED_CAPTURES

# The real H100 capture that ships with teesim (simulator/teesim/fixtures/captures).
H100_DIR = BUNDLED_CAPTURES / "h100-cc-off"


# ------------------------------------------------------------------------------------------------
# nvidia-smi: the real H100 capture and synthetic CC-on / broken cases
# ------------------------------------------------------------------------------------------------


def load_h100_capture():
    """The capture's files by name, read at import time because pyfakefs hides the real disk later."""
    return {path.name: path.read_text() for path in H100_DIR.iterdir() if path.is_file()}


H100_CAPTURE = load_h100_capture()


def h100_capture():
    return H100_CAPTURE


def capture_sections(text):
    """The capture file holds one ``## <args>`` section per nvidia-smi conf-compute invocation."""
    return dict(re.findall(r"^## (\S+)\n(.*?)(?=^## |\Z)", text, re.S | re.M))


def test_real_h100_capture_cc_off():
    capture = h100_capture()
    sections = capture_sections(capture["nvidia-smi-conf-compute.txt"])
    outputs = {
        "conf_compute_query": (0, sections["-q"], ""),
        "conf_compute_features": (0, sections["-f"], ""),
        "ready_state": (0, sections["-grs"], ""),
        "query": (0, capture["nvidia-smi-q.txt"], ""),
    }
    gpu, warnings = gf.summarize_gpu("/usr/bin/nvidia-smi", outputs)
    assert warnings == []
    assert gpu["present"] is True
    assert gpu["driver_version"] == "580.159.04" and gpu["cuda_version"] == "13.0"
    assert gpu["cc_capable"] is True
    assert (gpu["cc_state"], gpu["cc_enabled"], gpu["devtools"]) == ("OFF", False, False)
    assert gpu["cc_features"] == {"cc_status": "OFF"}
    assert gpu["multi_gpu_mode"] == "None" and gpu["cpu_cc_capabilities"] == "None"
    assert gpu["ready_state"] == "not-ready" and gpu["ready"] is False
    assert gpu["reasons"][0].startswith("GPU CC mode is off (CC state OFF)")
    assert gpu["gpus"] == [
        {
            "index": 0,
            "bus_id": "00000000:00:06.0",
            "name": "NVIDIA H100 80GB HBM3",
            "architecture": "Hopper",
            "uuid": "GPU-00000000-0000-0000-0000-000000000000",
            "vbios_version": "96.00.DA.00.0C",
            "virtualization_mode": "Pass-Through",
            "cc_protected_memory_mib": {"total": 0, "used": 0, "free": 0},
        }
    ]
    # Run without arguments, conf-compute prints its help: that must not look like CC facts.
    help_text = capture["nvidia-smi-conf-compute.txt"].split("## ")[0]
    assert gf.parse_conf_compute_query(help_text) is None
    assert gf.parse_conf_compute_features(help_text) == {}


CC_ON_QUERY = """
==============NVSMI CONF-COMPUTE LOG==============

    CC State                   : ON
    Multi-GPU Mode             : Protected PCIe
    CPU CC Capabilities        : INTEL TDX
    GPU CC Capabilities        : CC Capable
    CC GPUs Ready State        : Ready

"""

TWO_GPU_QUERY = """
==============NVSMI LOG==============

Timestamp                                 : Mon Jan  5 10:00:00 2026
Driver Version                            : 570.86.15
CUDA Version                              : 12.8

Attached GPUs                             : 2
GPU 00000000:1A:00.0
    Product Name                          : Synthetic GPU A
    Product Architecture                  : Hopper
    GPU UUID                              : GPU-aaaaaaaa-0000-0000-0000-000000000001
    Conf Compute Protected Memory Usage
        Total                             : 79872 MiB
        Used                              : 512 MiB
        Free                              : 79360 MiB
    FB Memory Usage
        Total                             : 1 MiB

GPU 00000000:9B:00.0
    Product Name                          : Synthetic GPU B
    GPU UUID                              : GPU-bbbbbbbb-0000-0000-0000-000000000002
    GPU Virtualization Mode
        Virtualization Mode               : None
"""


READY = "\nConfidential Compute GPUs Ready state: ready\n"


def outputs_for(query=CC_ON_QUERY, features="CC status: ON\n", ready=READY, smi_q=TWO_GPU_QUERY):
    return {
        "conf_compute_query": (0, query, ""),
        "conf_compute_features": (0, features, ""),
        "ready_state": (0, ready, ""),
        "query": (0, smi_q, ""),
    }


def test_gpu_cc_on_and_ready():
    gpu, warnings = gf.summarize_gpu("/usr/bin/nvidia-smi", outputs_for())
    assert warnings == []
    assert gpu["ready"] is True and gpu["reasons"] == []
    assert gpu["cc_enabled"] is True and gpu["cc_state"] == "ON"
    assert gpu["multi_gpu_mode"] == "Protected PCIe" and gpu["cpu_cc_capabilities"] == "INTEL TDX"
    assert [entry["bus_id"] for entry in gpu["gpus"]] == ["00000000:1A:00.0", "00000000:9B:00.0"]
    assert gpu["gpus"][0]["cc_protected_memory_mib"] == {"total": 79872, "used": 512, "free": 79360}
    assert gpu["gpus"][1]["cc_protected_memory_mib"] is None
    assert gpu["gpus"][1]["architecture"] is None and gpu["gpus"][1]["virtualization_mode"] == "None"


def test_gpu_cc_on_not_ready_says_set_ready_state():
    gpu = gf.summarize_gpu("nvidia-smi", outputs_for(ready=READY.replace("ready", "not-ready")))[0]
    assert gpu["ready"] is False
    assert "nvidia-smi conf-compute -srs 1" in gpu["reasons"][0]


def test_gpu_devtools_is_not_ready():
    gpu = gf.summarize_gpu("nvidia-smi", outputs_for(query=CC_ON_QUERY.replace(": ON", ": DEVTOOLS")))[0]
    assert gpu["cc_enabled"] is True and gpu["devtools"] is True and gpu["ready"] is False
    assert "DevTools" in gpu["reasons"][0]


def test_gpu_without_cc_support_is_a_fact_not_a_warning():
    no_cc = (6, "No CC capable devices found.\n", "")
    outputs = {
        "conf_compute_query": no_cc,
        "conf_compute_features": no_cc,
        "ready_state": no_cc,
        "query": (0, TWO_GPU_QUERY, ""),
    }
    gpu, warnings = gf.summarize_gpu("nvidia-smi", outputs)
    assert warnings == []
    assert gpu["present"] is True and gpu["cc_capable"] is False and gpu["ready"] is False
    assert gpu["reasons"] == ["the GPU does not support confidential computing (Hopper or newer is needed)"]


def test_gpu_failures_become_warnings():
    outputs = {
        "conf_compute_query": (124, "", ""),
        "conf_compute_features": (0, "\x00\xff garbage", ""),
        "ready_state": (9, "", "Failed to initialize NVML: Driver/library version mismatch\n"),
        "query": (0, "not a log", ""),
    }
    gpu, warnings = gf.summarize_gpu("/opt/nvidia-smi", outputs)
    problems = {warning["path"]: warning["problem"] for warning in warnings}
    assert problems == {
        "/opt/nvidia-smi conf-compute -q": "timed out: killed after gpu_timeout seconds without finishing",
        "/opt/nvidia-smi conf-compute -f": "no CC feature lines in output",
        "/opt/nvidia-smi conf-compute -grs": (
            "exit code 9: Failed to initialize NVML: Driver/library version mismatch"
        ),
        "/opt/nvidia-smi -q": "output is not an nvidia-smi log",
    }
    assert gpu["probed"] is True and gpu["present"] is None and gpu["ready"] is False
    assert gpu["reasons"] == ["GPU CC state unknown: nvidia-smi conf-compute gave no usable answer"]


def test_probe_gpu_runs_every_command_and_survives_a_crashing_runner():
    seen = []

    def run(argv, timeout):
        seen.append((argv, timeout))
        if argv[1:] == ["-q"]:
            raise OSError("exec format error")
        return dict(outputs_for())[
            {"-q": "conf_compute_query", "-f": "conf_compute_features", "-grs": "ready_state"}[argv[2]]
        ]

    gpu, warnings = gf.probe_gpu("/usr/bin/nvidia-smi", run, timeout=7)
    assert [call[0] for call in seen] == [
        ["/usr/bin/nvidia-smi", "conf-compute", "-q"],
        ["/usr/bin/nvidia-smi", "conf-compute", "-f"],
        ["/usr/bin/nvidia-smi", "conf-compute", "-grs"],
        ["/usr/bin/nvidia-smi", "-q"],
    ]
    assert {call[1] for call in seen} == {7}
    assert warnings == [{"path": "/usr/bin/nvidia-smi -q", "problem": "exit code 1: could not run: exec format error"}]
    assert gpu["ready"] is True and gpu["gpus"] == []


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=300) | st.text(max_size=300))
def test_gpu_parsers_never_raise(data):
    for parser in (
        gf.parse_colon_lines,
        gf.parse_conf_compute_query,
        gf.parse_conf_compute_features,
        gf.parse_ready_state,
        gf.parse_nvidia_smi_query,
    ):
        parser(data)


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=300) | st.text(max_size=300))
def test_summarize_gpu_never_raises(data):
    rc = len(data) % 3
    outputs = {command[0]: (rc, data, data[:10]) for command in gf.GPU_COMMANDS}
    gpu, warnings = gf.summarize_gpu("nvidia-smi", outputs)
    assert isinstance(gpu["ready"], bool)
    assert all(set(warning) == {"path", "problem"} for warning in warnings)
