#!/usr/bin/env bash
# Installs the Debian packages `make test` needs (podman with runc for Molecule, debootstrap for the
# base image, rsync for the ansible-test build path, gcc for teesim's native build, QEMU, qemu-img, sfdisk,
# mke2fs and ssh for the real-kernel VM of tests/vm; OVMF, mkfs.vfat and mtools for its systemd-boot variant:
# UEFI firmware and an EFI system partition made without a mount) when any is missing, and Debian's chromium
# for the fleet report's headless-browser test (best effort: without it that one test skips and says why).
# Idempotent; needs root or sudo.
set -euo pipefail
needed=(podman runc conmon fuse-overlayfs slirp4netns uidmap debootstrap rsync grub2-common gcc
  qemu-system-x86 qemu-utils fdisk e2fsprogs openssh-client ovmf dosfstools mtools)
optional=(chromium)
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
missing=()
for pkg in "${needed[@]}"; do installed "$pkg" || missing+=("$pkg"); done
missing_optional=()
for pkg in "${optional[@]}"; do installed "$pkg" || missing_optional+=("$pkg"); done
[ ${#missing[@]} -eq 0 ] && [ ${#missing_optional[@]} -eq 0 ] && exit 0
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
$sudo apt-get update -qq
if [ ${#missing[@]} -gt 0 ]; then
  echo "sysdeps: installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
if [ ${#missing_optional[@]} -gt 0 ]; then
  echo "sysdeps: installing ${missing_optional[*]}"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing_optional[@]}" ||
    echo "sysdeps: could not install ${missing_optional[*]}: the fleet report's browser test will skip"
fi
