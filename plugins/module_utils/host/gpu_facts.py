# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""NVIDIA GPU confidential-computing state from ``nvidia-smi``: parsers and the ``gpu`` fact.

Pure Python, standard library only. Output is taken as bytes and decoded here with replacement, so a
byte that is not UTF-8 is a visible U+FFFD, never an exception; a failing, timed-out or over-long
``nvidia-smi`` is a warning in the facts, never a failed task.
"""

from __future__ import annotations

import re

from ansible_collections.confidential.tee.plugins.module_utils.common.process import (
    DEFAULT_OUTPUT_LIMIT,
    TIMED_OUT,
    run_bounded,
)
from ansible_collections.confidential.tee.plugins.module_utils.common.validation import as_text

# The unprobed fact lives apart so that hosts gathered without nvidia-smi never import this module; re-exported
# here for the callers that probe and used by summarize_gpu.
from ansible_collections.confidential.tee.plugins.module_utils.host.gpu_unprobed import empty_gpu

MAX_COMMAND_OUTPUT = DEFAULT_OUTPUT_LIMIT

_GPU_HEADER_RE = re.compile(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*\Z")
# nvidia-smi -q pads keys and separates them with " : "; a bare ":" belongs to values such as bus ids.
_SMI_KV_RE = re.compile(r"^(\s*)(\S.*?)\s+:(?:\s(.*))?\Z")
_MIB_RE = re.compile(r"^(\d+)\s*MiB\Z")


# ---------------------------------------------------------------------------------------------------
# Pure parsers of nvidia-smi output
# ---------------------------------------------------------------------------------------------------


def _norm_key(key):
    return re.sub(r"[^a-z0-9]+", "_", key.strip().lower()).strip("_")


def parse_colon_lines(data):
    """``key: value`` lines (``conf-compute -f``/``-grs``/``-q``) as ``{normalised_key: value}``.

    The first occurrence of a key wins; lines without a colon (banners, blank lines) are ignored.
    """
    result = {}
    for line in as_text(data).splitlines():
        key, sep, value = line.partition(":")
        # "[-f | --get-cc-feature]: Display ..." is nvidia-smi's help text, printed on unknown options.
        if not sep or key.lstrip().startswith("["):
            continue
        norm = _norm_key(key)
        if norm and norm not in result:
            result[norm] = value.strip()
    return result


def _normalise_ready(value):
    if value is None:
        return None
    text = re.sub(r"[\s_]+", "-", value.strip().lower())
    if text in ("ready", "not-ready"):
        return text
    return None


def _on_off(value):
    if value is None:
        return None
    text = value.strip().lower()
    # DevTools mode is CC with debugging allowed: the GPU encrypts, but it is not for production.
    if text in ("on", "enabled", "enable", "devtools"):
        return True
    if text in ("off", "disabled", "disable"):
        return False
    return None


def _capable(value):
    if value is None:
        return None
    text = value.strip().lower()
    if not text or text in ("none", "n/a") or "not" in text or "no " in text:
        return False
    if "capable" in text:
        return True
    return None


def parse_conf_compute_query(data):
    """``nvidia-smi conf-compute -q``: system-wide CC state of the GPUs.

    Returns ``None`` when the text has none of the expected fields (help text, errors, garbage).
    """
    fields = parse_colon_lines(data)
    wanted = {
        "cc_state": fields.get("cc_state"),
        "multi_gpu_mode": fields.get("multi_gpu_mode"),
        "cpu_cc_capabilities": fields.get("cpu_cc_capabilities"),
        "gpu_cc_capabilities": fields.get("gpu_cc_capabilities"),
        "ready_state": fields.get("cc_gpus_ready_state"),
    }
    if all(value is None for value in wanted.values()):
        return None
    wanted["ready_state"] = _normalise_ready(wanted["ready_state"]) or wanted["ready_state"]
    return wanted


def parse_conf_compute_features(data):
    """``nvidia-smi conf-compute -f``: ``{normalised key: value}``, e.g. ``{"cc_status": "OFF"}``."""
    fields = parse_colon_lines(data)
    return {key: value for key, value in fields.items() if key.startswith("cc") or "mode" in key}


def parse_ready_state(data):
    """``nvidia-smi conf-compute -grs``: ``"ready"``, ``"not-ready"`` or ``None``."""
    for key, value in parse_colon_lines(data).items():
        if "ready_state" in key:
            return _normalise_ready(value)
    return None


def _parse_indented(lines):
    """nvidia-smi's indented ``key : value`` tree as nested dicts (first occurrence of a key wins)."""
    root = {}
    stack = [(-1, root)]
    for line in lines:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        while len(stack) > 1 and stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1]
        match = _SMI_KV_RE.match(line)
        if match:
            parent.setdefault(match.group(2).strip(), (match.group(3) or "").strip())
        else:
            section = {}
            if not isinstance(parent.get(line.strip()), dict):
                parent[line.strip()] = section
            stack.append((indent, section))
    return root


def _mib(value):
    match = _MIB_RE.match(value.strip()) if isinstance(value, str) else None
    return int(match.group(1)) if match else None


def _value(tree, *keys):
    node = tree
    for key in keys:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    if isinstance(node, dict):
        return None
    return None if node in ("", "N/A") else node


def parse_nvidia_smi_query(data):
    """``nvidia-smi -q``: driver and CUDA versions and one entry per GPU.

    Returns ``None`` when the text is not an nvidia-smi log (no driver version and no GPU block).
    """
    header = []
    blocks = []
    for line in as_text(data).splitlines():
        match = _GPU_HEADER_RE.match(line)
        if match:
            blocks.append((match.group(1), []))
        elif blocks:
            blocks[-1][1].append(line)
        else:
            header.append(line)
    top = _parse_indented(header)
    driver = _value(top, "Driver Version")
    if driver is None and not blocks:
        return None
    attached = _value(top, "Attached GPUs")
    gpus = []
    for index, (bus_id, lines) in enumerate(blocks):
        tree = _parse_indented(lines)
        protected = tree.get("Conf Compute Protected Memory Usage")
        gpus.append(
            {
                "index": index,
                "bus_id": bus_id,
                "name": _value(tree, "Product Name"),
                "architecture": _value(tree, "Product Architecture"),
                "uuid": _value(tree, "GPU UUID"),
                "vbios_version": _value(tree, "VBIOS Version"),
                "virtualization_mode": _value(tree, "GPU Virtualization Mode", "Virtualization Mode"),
                "cc_protected_memory_mib": None
                if not isinstance(protected, dict)
                else {key.lower(): _mib(protected.get(key)) for key in ("Total", "Used", "Free")},
            }
        )
    return {
        "driver_version": driver,
        "cuda_version": _value(top, "CUDA Version"),
        "attached_gpus": int(attached) if attached and attached.isdigit() else None,
        "gpus": gpus,
    }


# ---------------------------------------------------------------------------------------------------
# GPU confidential computing through nvidia-smi
# ---------------------------------------------------------------------------------------------------

GPU_COMMANDS = (
    ("conf_compute_query", ("conf-compute", "-q")),
    ("conf_compute_features", ("conf-compute", "-f")),
    ("ready_state", ("conf-compute", "-grs")),
    ("query", ("-q",)),
)
_NO_CC_DEVICE = "no cc capable"


class _Outputs:
    """The nvidia-smi results of one probe, turned into text or into warnings."""

    def __init__(self, nvidia_smi, outputs, gpu):
        self.nvidia_smi = nvidia_smi
        self.outputs = outputs
        self.gpu = gpu
        self.warnings = []

    def warn(self, name, problem):
        argv = dict(GPU_COMMANDS)[name]
        self.warnings.append({"path": "%s %s" % (self.nvidia_smi, " ".join(argv)), "problem": problem})

    def text(self, name):
        """The command's output when it succeeded, else ``None`` (with a warning where it failed)."""
        result = self.outputs.get(name)
        if result is None:
            return None
        rc, out, err = result[:3]
        out, err = as_text(out), as_text(err)
        if _NO_CC_DEVICE in (out + err).lower():
            # nvidia-smi exits 6 on GPUs without CC support: that is an answer, not a failure.
            self.gpu["cc_capable"] = False
            return None
        if len(result) > 3 and result[3]:
            # Killed for printing too much: what arrived is still worth parsing.
            self.warn(name, "printed more than %d bytes: stopped, only the beginning was parsed" % MAX_COMMAND_OUTPUT)
            return out
        if rc in (TIMED_OUT, 137, -9):
            self.warn(name, "timed out: killed after gpu_timeout seconds without finishing")
            return None
        if rc != 0:
            detail = (err.strip() or out.strip() or "no output").splitlines()[0][:200]
            self.warn(name, "exit code %s: %s" % (rc, detail))
            return None
        return out


def _apply_query(gpu, outputs):
    query = outputs.text("query")
    if query is None:
        return
    parsed = parse_nvidia_smi_query(query)
    if parsed is None:
        outputs.warn("query", "output is not an nvidia-smi log")
        return
    gpu["driver_version"] = parsed["driver_version"]
    gpu["cuda_version"] = parsed["cuda_version"]
    gpu["gpus"] = parsed["gpus"]
    gpu["present"] = bool(parsed["gpus"]) or bool(parsed["attached_gpus"])


def _apply_conf_compute(gpu, outputs):
    conf = outputs.text("conf_compute_query")
    if conf is not None:
        parsed = parse_conf_compute_query(conf)
        if parsed is None:
            outputs.warn("conf_compute_query", "no CC fields in the output")
        else:
            gpu["cc_state"] = parsed["cc_state"]
            gpu["cc_enabled"] = _on_off(parsed["cc_state"])
            gpu["cpu_cc_capabilities"] = parsed["cpu_cc_capabilities"]
            gpu["multi_gpu_mode"] = parsed["multi_gpu_mode"]
            gpu["cc_capable"] = _capable(parsed["gpu_cc_capabilities"])
            gpu["ready_state"] = _normalise_ready(parsed["ready_state"])
    features = outputs.text("conf_compute_features")
    if features is not None:
        gpu["cc_features"] = parse_conf_compute_features(features)
        status = gpu["cc_features"].get("cc_status")
        if gpu["cc_enabled"] is None and status is not None:
            gpu["cc_state"] = status
            gpu["cc_enabled"] = _on_off(status)
        if not gpu["cc_features"]:
            outputs.warn("conf_compute_features", "no CC feature lines in output")
    ready_out = outputs.text("ready_state")
    if ready_out is not None:
        state = parse_ready_state(ready_out)
        if state is None:
            outputs.warn("ready_state", "no GPUs ready state in output")
        else:
            gpu["ready_state"] = state


def _gpu_reasons(gpu):
    """Why the GPU is not ready for confidential guests, most fundamental first (empty when ready)."""
    if gpu["ready"]:
        return []
    if gpu["present"] is False:
        return ["nvidia-smi lists no GPU"]
    if gpu["cc_capable"] is False:
        return ["the GPU does not support confidential computing (Hopper or newer is needed)"]
    if gpu["cc_enabled"] is False:
        return [
            "GPU CC mode is off (CC state %s): switch it on with NVIDIA's gpu-admin-tools "
            "(`nvidia_gpu_tools.py --set-cc-mode=on --reset-after-cc-mode-switch`) on the host" % gpu["cc_state"]
        ]
    if gpu["cc_enabled"] is None:
        return ["GPU CC state unknown: nvidia-smi conf-compute gave no usable answer"]
    if gpu["devtools"]:
        return [
            "GPU CC is in DevTools mode: memory is encrypted but debugging is allowed, which is not "
            "confidential; set CC mode to on (not devtools) with gpu-admin-tools"
        ]
    return [
        "GPU CC is on but the GPUs are %s: inside the confidential guest, attest the GPU and then run "
        "`nvidia-smi conf-compute -srs 1`" % (gpu["ready_state"] or "in an unknown ready state")
    ]


def summarize_gpu(nvidia_smi, outputs):
    """The ``gpu`` fact from nvidia-smi results.

    ``outputs`` maps each :data:`GPU_COMMANDS` name to ``(rc, stdout, stderr[, truncated])`` (missing: not
    run). Returns ``(gpu, warnings)``; a failed, timed-out or unparsable command is a warning, never an error.
    """
    gpu = empty_gpu()
    gpu["probed"] = True
    gpu["nvidia_smi"] = nvidia_smi
    results = _Outputs(nvidia_smi, outputs, gpu)
    _apply_query(gpu, results)
    _apply_conf_compute(gpu, results)
    if gpu["cc_state"] is not None:
        gpu["devtools"] = "devtools" in gpu["cc_state"].lower() or any(
            "devtools" in key and _on_off(value) for key, value in gpu["cc_features"].items()
        )
    if gpu["present"] is None and (gpu["cc_state"] is not None or gpu["cc_capable"] is not None):
        gpu["present"] = True
    gpu["ready"] = gpu["cc_enabled"] is True and gpu["ready_state"] == "ready" and not gpu["devtools"]
    gpu["reasons"] = _gpu_reasons(gpu)
    return gpu, results.warnings


def bounded_runner(env=None):
    """``run(argv, timeout) -> (rc, stdout, stderr, truncated)`` with bytes out and bounded output."""

    def run(argv, timeout):
        done = run_bounded(argv, timeout, limit=MAX_COMMAND_OUTPUT, env=env)
        return done.rc, done.stdout, done.stderr, done.truncated

    return run


def probe_gpu(nvidia_smi, run=None, timeout=20):
    """Run every :data:`GPU_COMMANDS` through ``run(argv, timeout)`` (default: :func:`bounded_runner`).

    An exception from the runner (the binary vanished, say) is reported like a failed command.
    """
    run = run or bounded_runner()
    outputs = {}
    for name, argv in GPU_COMMANDS:
        try:
            outputs[name] = run([nvidia_smi, *argv], timeout)
        except Exception as exc:  # a runner must never take the whole fact gathering down
            outputs[name] = (1, "", "could not run: %s" % exc)
    return summarize_gpu(nvidia_smi, outputs)
