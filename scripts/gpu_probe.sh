#!/usr/bin/env bash
# Run confidential.tee's pure host/GPU parsers against the live machine and print the facts as JSON.
#
# Needs only bash, python3 (3.9+) and, for the GPU part, nvidia-smi: no Ansible, no virtualenv. The
# module_utils of this checkout are imported (through teesim._collection, stdlib only), so this checks
# exactly the code the tee_host_info module ships.
#
# usage: scripts/gpu_probe.sh [RAW_DIR]
#   RAW_DIR         also save each nvidia-smi command's raw stdout/stderr/rc there (for new fixtures)
#   NVIDIA_SMI      nvidia-smi to run (default: the one on PATH)
#   GPU_TIMEOUT     seconds per nvidia-smi command (default 20)
#   HOST_ROOT       host tree to read (default /)
#
# Exit status: 0 facts printed and the self-checks passed; 1 a self-check failed (facts still printed);
# 2 nvidia-smi not found (host facts still printed); 3 python3 or the checkout's parsers missing.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
raw_dir="${1:-}"

if ! command -v python3 >/dev/null 2>&1; then
    echo "gpu_probe: python3 not found on PATH" >&2
    exit 3
fi
if [[ ! -f "$repo/plugins/module_utils/host/host_facts.py" || ! -f "$repo/simulator/teesim/_collection.py" ]]; then
    echo "gpu_probe: $repo is not a confidential.tee checkout (plugins/module_utils, simulator/teesim)" >&2
    exit 3
fi
if [[ -n "$raw_dir" ]]; then
    mkdir -p "$raw_dir"
fi

exec python3 - "$repo" "${NVIDIA_SMI:-}" "${GPU_TIMEOUT:-20}" "${HOST_ROOT:-/}" "$raw_dir" <<'PY'
import json
import os
import shutil
import sys

repo, nvidia_smi, timeout, host_root, raw_dir = sys.argv[1:6]
sys.path.insert(0, os.path.join(repo, "simulator"))
from teesim._collection import HostReader, collection_module  # noqa: E402

hf = collection_module("plugins.module_utils.host.host_facts")
gf = collection_module("plugins.module_utils.host.gpu_facts")
bounded = gf.bounded_runner(dict(os.environ, LC_ALL="C"))
raw = {}


def run(argv, timeout):
    """The module's own bounded runner, recording what each command printed."""
    rc, out, err, truncated = bounded(argv, timeout)
    raw[" ".join(argv[1:])] = (rc, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))
    return rc, out, err, truncated


nvidia_smi = nvidia_smi or shutil.which("nvidia-smi") or ""
gpu = gf.probe_gpu(nvidia_smi, run, int(timeout)) if nvidia_smi else None
facts = hf.gather_host_facts(HostReader(host_root), gpu=gpu)
if not nvidia_smi:
    facts["gpu"]["reasons"].append("nvidia-smi not found on PATH (set NVIDIA_SMI)")
print(json.dumps(facts, indent=2, sort_keys=True))

if raw_dir:
    for args, (rc, out, err) in raw.items():
        stem = os.path.join(raw_dir, "nvidia-smi_" + args.replace(" -", "_").lstrip("-"))
        for suffix, text in ((".out", out), (".err", err), (".rc", "%s\n" % rc)):
            with open(stem + suffix, "w") as handle:
                handle.write(text)

# Self-checks: the parsers must have understood what a working nvidia-smi printed.
problems = []
g = facts["gpu"]
if nvidia_smi:
    rc_q, out_q, _ = raw.get("-q", (1, "", ""))
    if rc_q == 0:
        attached = [line for line in out_q.splitlines() if line.startswith("Attached GPUs")]
        count = int(attached[0].split(":")[1]) if attached and attached[0].split(":")[1].strip().isdigit() else None
        if count is not None and count != len(g["gpus"]):
            problems.append("nvidia-smi -q says %s GPUs, parser found %d" % (count, len(g["gpus"])))
        if not g["driver_version"]:
            problems.append("driver version not parsed from nvidia-smi -q")
    rc_cc, out_cc, err_cc = raw.get("conf-compute -q", (1, "", ""))
    if rc_cc == 0 and "no cc capable" not in (out_cc + err_cc).lower():
        if g["cc_state"] is None or g["cc_capable"] is None:
            problems.append("conf-compute -q succeeded but CC state/capability was not parsed")
    rc_grs, _, _ = raw.get("conf-compute -grs", (1, "", ""))
    if rc_grs == 0 and g["ready_state"] is None:
        problems.append("conf-compute -grs succeeded but the ready state was not parsed")
summary = "gpu_probe: nvidia-smi=%s driver=%s gpus=%d cc_capable=%s cc_state=%s ready_state=%s ready=%s warnings=%d" % (
    nvidia_smi or "-", g["driver_version"], len(g["gpus"]), g["cc_capable"], g["cc_state"], g["ready_state"],
    g["ready"], len(facts["warnings"]))
print(summary, file=sys.stderr)
for problem in problems:
    print("gpu_probe: SELF-CHECK FAILED: " + problem, file=sys.stderr)
if problems:
    sys.exit(1)
sys.exit(0 if nvidia_smi else 2)
PY
