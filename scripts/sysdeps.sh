#!/usr/bin/env bash
# Installs the Debian packages `make test` needs (podman with runc for Molecule, debootstrap for the
# base image, rsync for the ansible-test build path) when any is missing. Idempotent; needs root or sudo.
set -euo pipefail
needed=(podman runc conmon fuse-overlayfs slirp4netns uidmap debootstrap rsync grub2-common)
missing=()
for pkg in "${needed[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "sysdeps: installing ${missing[*]}"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
