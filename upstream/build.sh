#!/usr/bin/env bash
# Build the upstream programs the upstream checks run (docs/simulator.md, "Upstream code in the loop"),
# from the Go module proxy, into a cache outside the checkout:
#   ~/.cache/confidential-tee/upstream/<name>-<key>/  (key: hash of the wrapper's go.mod, go.sum and
#   sources, the Go version and the link flags; a changed wrapper builds a new directory, an unchanged one
#   is reused in well under a second).
# Each build happens in a temporary directory that is renamed into place: a reader never sees half a
# build, and two builds racing both end with a complete one.
#
#   nfd               NFD v0.19.0's nfd and kubectl-nfd, linked as NFD's container image links them
#                     (hostpath.pathPrefix=/host-: it reads the host under /host-sys, /host-boot, ...)
#   kubevirt-plugins  KubeVirt v1.9.0's virt-handler device plugins (upstream/kubevirt-plugins/main.go), and
#                     crds/: KubeVirt's CRDs as its virt-operator generates them (upstream/kubevirt-plugins/crdgen,
#                     run once here; the live tests install them)
#
# Usage: upstream/build.sh [--print] [NAME...]   (default: both). Prints NAME=DIR per program; exit 3 without Go.
# --print builds nothing: NAME=DIR for each program already built, exit 1 if one is not.
set -euo pipefail

print_only=false
if [[ "${1:-}" == --print ]]; then
  print_only=true
  shift
fi

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${TEESIM_UPSTREAM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/confidential-tee/upstream}"
if ! command -v go > /dev/null; then
  echo "upstream/build.sh: no go on PATH: the upstream checks need Go and the Go module proxy" >&2
  exit 3
fi

nfd_ldflags="-X sigs.k8s.io/node-feature-discovery/pkg/utils/hostpath.pathPrefix=/host-"

packages_of() {
  case "$1" in
    nfd) echo "sigs.k8s.io/node-feature-discovery/cmd/nfd sigs.k8s.io/node-feature-discovery/cmd/kubectl-nfd" ;;
    kubevirt-plugins) echo ". ./crdgen" ;;
    *)
      echo "upstream/build.sh: unknown program $1 (nfd, kubevirt-plugins)" >&2
      exit 2
      ;;
  esac
}

ldflags_of() {
  if [[ "$1" == nfd ]]; then echo "$nfd_ldflags"; else echo ""; fi
}

build() {
  local name="$1" src="$here/$1" key dir tmp
  key="$(
    cd "$src"
    {
      go version
      ldflags_of "$name"
      find . -type f \( -name '*.go' -o -name go.mod -o -name go.sum \) -print0 | sort -z | xargs -0 sha256sum
    } | sha256sum | cut -c1-16
  )"
  dir="$cache/$name-$key"
  if [[ ! -f "$dir/.complete" ]] && "$print_only"; then
    exit 1
  fi
  if [[ ! -f "$dir/.complete" ]]; then
    mkdir -p "$cache"
    tmp="$(mktemp -d "$cache/.$name-XXXXXX")"
    # shellcheck disable=SC2046  # the package list is meant to split
    if ! (cd "$src" && CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false" go build -trimpath -ldflags "$(ldflags_of "$name")" \
      -o "$tmp/" $(packages_of "$name")); then
      rm -rf "$tmp"
      echo "upstream/build.sh: building $name failed (see above)" >&2
      exit 1
    fi
    if [[ "$name" == kubevirt-plugins ]] && ! (mkdir "$tmp/crds" && "$tmp/crdgen" "$tmp/crds"); then
      rm -rf "$tmp"
      echo "upstream/build.sh: generating KubeVirt's CRDs failed (see above)" >&2
      exit 1
    fi
    touch "$tmp/.complete"
    if ! mv -T "$tmp" "$dir" 2> /dev/null; then
      rm -rf "$tmp" # another build won the race; its result is the same
    fi
  fi
  echo "$name=$dir"
}

names=("$@")
[[ ${#names[@]} -gt 0 ]] || names=(nfd kubevirt-plugins)
for name in "${names[@]}"; do
  packages_of "$name" > /dev/null
  build "$name"
done
