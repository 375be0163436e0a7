#!/usr/bin/env bash
# Prints the containers.conf podman needs on these machines, writing it first: runc (crun refuses the hybrid
# cgroup layout) and pinned ulimits (root cannot raise rlimits). Callers export CONTAINERS_CONF=$(this script)
# unless they already select one. Used by molecule.sh and agent_image.py.
set -euo pipefail
cache_dir="${TEE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/confidential-tee}"
mkdir -p "$cache_dir"
conf="$cache_dir/containers.conf"
cat >"$conf.new.$$" <<'CONF'
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]

[engine]
runtime = "runc"
CONF
mv "$conf.new.$$" "$conf"
echo "$conf"
