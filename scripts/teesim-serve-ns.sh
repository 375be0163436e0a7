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
# Where the machine has no /var/lib/kubelet, a tmpfs is mounted over /var/lib inside the namespace to
# hold the mount point (the plugin then sees an otherwise empty /var/lib). Not root: a user namespace
# (--map-root-user) is used, where the distribution allows unprivileged ones.
#
# Usage: scripts/teesim-serve-ns.sh [--cgroup] ROOT COMMAND [ARG...]
#   e.g. teesim serve serve-double-pool-tdx --root /tmp/node \
#          --plugin 'scripts/teesim-serve-ns.sh --cgroup $TEESIM_HOST_ROOT ./my-plugin --flags'
set -euo pipefail

usage() {
  echo "usage: $0 [--cgroup] ROOT COMMAND [ARG...]  (ROOT: the --root of a running teesim serve)" >&2
  exit 2
}

cgroup=0
if [[ "${1:-}" == "--cgroup" ]]; then
  cgroup=1
  shift
fi
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
exec unshare "${userns[@]}" --mount --propagation private -- bash -euc '
  root="$1" cgroup="$2"
  shift 2
  if [[ ! -d /var/lib/kubelet ]]; then
    mount -t tmpfs teesim-var-lib /var/lib
    mkdir -p /var/lib/kubelet
  fi
  mount --bind "$root/var/lib/kubelet" /var/lib/kubelet
  if [[ "$cgroup" == 1 ]]; then
    mount --bind "$root/sys/fs/cgroup" /sys/fs/cgroup
  fi
  exec "$@"
' teesim-serve-ns "$root" "$cgroup" "$@"
