#!/usr/bin/env bash
# Runs the Molecule scenarios under extensions/molecule (podman driver, local image, no registry).
#   scripts/molecule.sh              every scenario (molecule test --all)
#   scripts/molecule.sh check_mode   one scenario
# Podman here needs runc and pinned ulimits (crun refuses the hybrid cgroup layout and root cannot raise
# rlimits): a containers.conf with both is written once and selected with CONTAINERS_CONF, unless the
# caller already selects one.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
if [ -z "${CONTAINERS_CONF:-}" ]; then
  CONTAINERS_CONF="$("$repo/scripts/podman-conf.sh")"
  export CONTAINERS_CONF
fi

export PATH="$repo/.venv/bin:$PATH"
export ANSIBLE_COLLECTIONS_PATH="${ANSIBLE_COLLECTIONS_PATH:-$repo/.build/collections}"
export ANSIBLE_CONFIG="${ANSIBLE_CONFIG:-$repo/ansible.cfg}"
export ANSIBLE_ROLES_PATH="$repo/roles"
# Molecule would otherwise try to install the collection it is testing from Galaxy (unreachable).
export MOLECULE_COLLECTIONS_PATH="$ANSIBLE_COLLECTIONS_PATH"
[ -e "$ANSIBLE_COLLECTIONS_PATH/ansible_collections/confidential/tee" ] \
  || { echo "molecule.sh: run 'make collection' first (links this checkout as confidential.tee)" >&2; exit 1; }

"$repo/scripts/molecule-image.sh"

cd "$repo/extensions"
start=$SECONDS
if [ $# -eq 0 ]; then
  molecule test --all
else
  for scenario in "$@"; do molecule test -s "$scenario"; done
fi
echo "molecule.sh: scenarios passed in $((SECONDS - start)) s"
