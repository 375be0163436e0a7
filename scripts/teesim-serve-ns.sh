#!/usr/bin/env bash
# Run a device plugin that hard-codes the node's paths against `teesim serve --root ROOT`, unchanged.
#
# A plugin that dials /var/lib/kubelet/device-plugins/kubelet.sock and /var/lib/kubelet/pod-resources/
# kubelet.sock (the kubelet's pluginapi.DevicePluginPath and its pod-resources socket), and with
# --cgroup one that reads /sys/fs/cgroup/misc.{capacity,current} as well, runs in a private mount
# namespace (unshare --mount, propagation private) where ROOT's directories are bind-mounted over those
# paths. Nothing outside that namespace changes. Directories are bound, not files: teesim replaces its
# files by rename, which a file bind mount would not follow.
#
# --pid also gives the plugin a private PID namespace in which it is PID 1, with its own /proc: a plugin
# that reads the host through /proc/1/root (KubeVirt's virt-handler: util.HostRootMount, e.g.
# /proc/1/root/sys/fs/cgroup/misc.capacity) then reads the namespace's root, where ROOT is bound.
# --run-dir NAME (repeatable) mounts a tmpfs over /run inside the namespace holding an empty /run/NAME: a
# directory a host daemon would own (e.g. tdx-qgs, where the TDX quote generation service puts its socket
# and KubeVirt's TDX plugin watches for it).
#
# Where the machine has no /var/lib/kubelet, a tmpfs is mounted over /var/lib inside the namespace to
# hold the mount point (the plugin then sees an otherwise empty /var/lib). Not root: a user namespace
# (--map-root-user) is used, where the distribution allows unprivileged ones.
#
# Usage: scripts/teesim-serve-ns.sh [--cgroup] [--pid] [--run-dir NAME]... ROOT COMMAND [ARG...]
#   e.g. teesim serve serve-double-pool-tdx --root /tmp/node \
#          --plugin 'scripts/teesim-serve-ns.sh --cgroup $TEESIM_HOST_ROOT ./my-plugin --flags'
set -euo pipefail

usage() {
  echo "usage: $0 [--cgroup] [--pid] [--run-dir NAME]... ROOT COMMAND [ARG...]" \
    "(ROOT: the --root of a running teesim serve)" >&2
  exit 2
}

cgroup=0
pidns=()
run_dirs=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --cgroup) cgroup=1 ;;
    # --kill-child: SIGTERM to the script (serve stopping its plugins) reaches the plugin, PID 1 inside.
    --pid) pidns=(--pid --fork --mount-proc --kill-child=SIGTERM) ;;
    --run-dir)
      [[ "${2:-}" =~ ^[A-Za-z0-9._-]+$ && "$2" != . && "$2" != .. ]] || usage
      run_dirs+=("$2")
      shift
      ;;
    *) break ;;
  esac
  shift
done
[[ $# -ge 2 ]] || usage
root="$(cd "$1" && pwd)" || usage
shift
if [[ ! -S "$root/var/lib/kubelet/device-plugins/kubelet.sock" ]]; then
  echo "$0: no kubelet socket at $root/var/lib/kubelet/device-plugins/kubelet.sock:" \
    "start 'teesim serve SCENARIO --root $root' first and wait for its ready line" >&2
  exit 2
fi
if [[ "$cgroup" == 1 && ! -d "$root/sys/fs/cgroup" ]]; then
  echo "$0: --cgroup: $root/sys/fs/cgroup does not exist (is $root a teesim serve root?)" >&2
  exit 2
fi
userns=()
if [[ "$(id -u)" != 0 ]]; then
  userns=(--map-root-user)
fi

# shellcheck disable=SC2016  # expanded by the inner shell, inside the namespace
inner='
  root="$1" cgroup="$2" run_dirs="$3"
  shift 3
  if [[ ! -d /var/lib/kubelet ]]; then
    mount -t tmpfs teesim-var-lib /var/lib
    mkdir -p /var/lib/kubelet
  fi
  mount --bind "$root/var/lib/kubelet" /var/lib/kubelet
  if [[ "$cgroup" == 1 ]]; then
    mount --bind "$root/sys/fs/cgroup" /sys/fs/cgroup
  fi
  if [[ -n "$run_dirs" ]]; then
    mount -t tmpfs teesim-run /run
    for name in $run_dirs; do mkdir -p "/run/$name"; done
  fi
  exec "$@"
'
command=(unshare "${userns[@]}" "${pidns[@]}" --mount --propagation private -- bash -euc "$inner"
  teesim-serve-ns "$root" "$cgroup" "${run_dirs[*]}" "$@")
if [[ ${#pidns[@]} -eq 0 ]]; then
  exec "${command[@]}"
fi
# unshare --fork blocks SIGTERM and SIGINT in itself and waits for its child: pass them on to the child (the
# plugin, PID 1 of the new namespace), so that `teesim serve` stopping its plugins stops this one at once.
"${command[@]}" &
ns_pid=$!
forward() {
  local child
  child="$(cat "/proc/$ns_pid/task/$ns_pid/children" 2> /dev/null || true)"
  # shellcheck disable=SC2086  # one PID, or none
  if [[ -n "$child" ]]; then kill -"$1" $child 2> /dev/null || true; fi
}
trap 'forward TERM' TERM
trap 'forward INT' INT
while true; do
  status=0
  wait "$ns_pid" || status=$?
  kill -0 "$ns_pid" 2> /dev/null || exit "$status"
done
