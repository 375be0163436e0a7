#!/usr/bin/env bash
# Builds the Debian 12 VM image that tests/vm boots under QEMU (TCG, no KVM): a raw disk with an MBR, one
# ext4 partition and GRUB (grub-pc) installed into it, built only from Debian's packages:
#   1. debootstrap minbase + linux-image-amd64, grub-pc, openssh-server, python3, sudo (about 3-5 min);
#   2. trim it: static network (QEMU user networking is always 10.0.2.15/24), no timers, no getty on tty1,
#      an initramfs with only the virtio and ext4 modules, GRUB_TIMEOUT=0 on the serial console;
#   3. mke2fs -d (no loop device, no mount) and sfdisk assemble the disk;
#   4. one boot of that disk with -kernel runs grub-install /dev/vda and update-grub *inside* the guest, so
#      GRUB is installed by the guest's own tools onto the guest's own disk, then powers off.
# The result is cached under ~/.cache/confidential-tee/vm/ (keyed by this script's content), built in a
# temporary directory and renamed into place, so a half-built image is never used; older builds of the variant
# are removed once no test run uses them (see the end of this script).
# Prints the image directory (disk.raw, id_ed25519, cmdline) on stdout.
#
# `vm-image.sh systemd-boot` builds the other variant, for the /etc/kernel/cmdline + kernel-install path: a GPT
# disk with a FAT EFI system partition (made without a mount: mkfs.vfat -C, mcopy) mounted at /boot/efi and the
# same ext4 root; systemd-boot instead of GRUB, installed in the chroot by the guest's own `bootctl install`,
# and the kernel's loader entry written by the guest's own `kernel-install add` from /etc/kernel/cmdline (the
# entry token is fixed, "debian", so the entry keeps its name whatever machine-id the first boot makes). It
# boots under OVMF (UEFI) from the removable-media path EFI/BOOT/BOOTX64.EFI, so no EFI variable is needed.
# Each variant is cached on its own (debian-12-<variant>-<key>) and trims only its own older builds.
#
# Environment: DEBIAN_MIRROR (default: the mirror apt uses), TEE_CACHE_DIR, FORCE_REBUILD=1.
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
variant="${1:-grub}"
case "$variant" in grub | systemd-boot) ;; *) echo "vm-image: unknown variant $variant (grub or systemd-boot)" >&2; exit 2 ;; esac
cache_dir="${TEE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/confidential-tee}/vm"
key="$(sha256sum "$0" | cut -c1-12)"
image_dir="$cache_dir/debian-12-$variant-$key"
# dbus: systemctl reboot/shutdown with a wall message (what ansible.builtin.reboot runs) needs logind over D-Bus.
packages=linux-image-amd64,openssh-server,python3,sudo,systemd-sysv,udev,kmod,iproute2,e2fsprogs,dbus
if [ "$variant" = grub ]; then packages="$packages,grub-pc"; else packages="$packages,systemd-boot"; fi
# Arguments the tests expect to survive every role run byte for byte (none of them is a TEE argument).
# tsc=reliable: on a loaded host the guest's clocksource watchdog marks the emulated TSC unstable and falls back
# to the HPET, whose every read is an emulated MMIO access: the guest then runs many times slower.
# no_timer_check: the kernel's early check that the timer interrupt ticks through the IO-APIC counts ticks against
# a busy loop; an emulated CPU starved by a loaded host fails it and panics ("IO-APIC + timer doesn't work!",
# seen at a load average of 26). The check exists for broken hardware timers, which an emulated machine has not.
base_cmdline="console=ttyS0,115200n8 net.ifnames=0 mitigations=off tsc=reliable no_timer_check tee_vm.marker=keep-me"

log() { printf 'vm-image: %s\n' "$*" >&2; }

if [ "${FORCE_REBUILD:-0}" != 1 ] && [ -s "$image_dir/disk.raw" ]; then
  echo "$image_dir"
  exit 0
fi
tools=(debootstrap qemu-system-x86_64 mke2fs sfdisk ssh-keygen)
[ "$variant" = grub ] || tools+=(mkfs.vfat mcopy)
for tool in "${tools[@]}"; do
  command -v "$tool" >/dev/null || { log "$tool is missing: run scripts/sysdeps.sh"; exit 1; }
done
[ "$(id -u)" -eq 0 ] || { log "debootstrap needs root (it creates device nodes and chroots)"; exit 1; }

mirror="${DEBIAN_MIRROR:-$("$repo/scripts/apt-mirror.sh")}"
mkdir -p "$cache_dir"
work="$(mktemp -d "$cache_dir/build.XXXXXX")"
# The systemd-boot variant mounts a tmpfs in the tree for a moment (below): never remove through a mount.
trap 'umount -q "$work/rootfs/proc" "$work/rootfs/boot/efi" 2>/dev/null; rm -rf "$work"' EXIT
root="$work/rootfs"
start=$SECONDS

# ---------------------------------------------------------------------------------------------- GRUB variant
configure_grub() {
  cat >"$root/etc/default/grub" <<GRUB
# Written by scripts/vm-image.sh (confidential.tee's test VM).
GRUB_DEFAULT=0
GRUB_TIMEOUT=0
GRUB_TIMEOUT_STYLE=hidden
GRUB_DISTRIBUTOR=Debian
GRUB_CMDLINE_LINUX_DEFAULT="quiet"
GRUB_CMDLINE_LINUX="$base_cmdline"
GRUB_TERMINAL=serial
GRUB_SERIAL_COMMAND="serial --speed=115200"
GRUB_DISABLE_OS_PROBER=true
GRUB_DISABLE_RECOVERY=true
GRUB
  # update-grub runs only 00_header, 05_debian_theme, 10_linux and the custom files: the Xen, os-prober and
  # UEFI-firmware scripts each probe the disk again (grub-probe under TCG costs seconds) and add nothing here.
  chmod -x "$root/etc/grub.d/20_linux_xen" "$root/etc/grub.d/30_os-prober" "$root/etc/grub.d/30_uefi-firmware"
  # Stage 4 runs this as init: grub-install and update-grub on the guest's own disk, then power off.
  cat >"$root/usr/local/sbin/tee-vm-install-grub" <<'STAGE'
#!/bin/sh
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev 2>/dev/null
mount -o remount,rw /
if grub-install --target=i386-pc /dev/vda && update-grub; then echo TEE-VM-GRUB-OK; else echo TEE-VM-GRUB-FAILED; fi
sync; mount -o remount,ro /; echo o >/proc/sysrq-trigger; sleep 30
STAGE
  chmod 0755 "$root/usr/local/sbin/tee-vm-install-grub"
}

assemble_grub_disk() {
  local kernel part_start_mib=1 part_size_mib=3071
  kernel="$(cd "$root/boot" && ls vmlinuz-* | sort -V | tail -n1)"
  cp "$root/boot/$kernel" "$work/vmlinuz"
  cp "$root/boot/initrd.img-${kernel#vmlinuz-}" "$work/initrd.img"
  mke2fs -q -t ext4 -L tee-vm-root -d "$root" "$work/root.ext4" "${part_size_mib}M" >&2
  truncate -s "$((part_start_mib + part_size_mib))M" "$work/disk.raw"
  printf 'label: dos\nstart=%sMiB, type=83, bootable\n' "$part_start_mib" | sfdisk -q "$work/disk.raw"
  dd if="$work/root.ext4" of="$work/disk.raw" bs=1M seek="$part_start_mib" conv=notrunc,sparse status=none
  rm -rf "$root" "$work/root.ext4"

  log "installing GRUB from inside the guest (one TCG boot)"
  timeout 900 qemu-system-x86_64 -machine q35 -accel tcg -m 1024 -smp 2 -nographic -no-reboot \
    -drive "file=$work/disk.raw,format=raw,if=virtio" -kernel "$work/vmlinuz" -initrd "$work/initrd.img" \
    -append "root=/dev/vda1 rw console=ttyS0 tsc=reliable no_timer_check init=/usr/local/sbin/tee-vm-install-grub" \
    -nic none </dev/null >"$work/stage.log" 2>&1 || true
  grep -q TEE-VM-GRUB-OK "$work/stage.log" \
    || { log "GRUB installation in the guest failed:"; tail -n 40 "$work/stage.log" >&2; exit 1; }
  rm -f "$work/stage.log"
}

# ---------------------------------------------------------------------------------------- systemd-boot variant
configure_systemd_boot() {
  local release
  release="$(cd "$root/boot" && ls vmlinuz-* | sort -V | tail -n1)"
  release="${release#vmlinuz-}"
  echo debian >"$root/etc/kernel/entry-token"
  echo "root=/dev/vda2 ro $base_cmdline" >"$root/etc/kernel/cmdline"
  # bootctl wants the ESP to be the root of a mounted FAT file system: here a tmpfs is mounted where the ESP
  # will be, and SYSTEMD_RELAX_ESP_CHECKS (systemd's switch for image builds) skips the FAT and partition checks;
  # its content becomes the FAT image below. --no-variables: there are no EFI variables to write here; the
  # firmware boots EFI/BOOT/BOOTX64.EFI, which bootctl installs too.
  # bootctl writes its files atomically through /proc/self/fd: /proc is mounted for the two commands.
  install -d -m 0700 "$root/boot/efi"
  mount -t tmpfs -o mode=0700 tee-vm-esp "$root/boot/efi"
  mount -t proc proc "$root/proc"
  SYSTEMD_RELAX_ESP_CHECKS=1 chroot "$root" bootctl install --esp-path=/boot/efi --no-variables \
    --entry-token=literal:debian --make-entry-directory=yes >"$work/bootctl.log" 2>&1 \
    || { log "bootctl install failed:"; cat "$work/bootctl.log" >&2; exit 1; }
  printf 'timeout 0\n' >"$root/boot/efi/loader/loader.conf"  # no menu: boot the one entry at once
  # What Debian's own hook runs once systemd-boot is installed (/etc/initramfs/post-update.d/systemd-boot).
  SYSTEMD_RELAX_ESP_CHECKS=1 chroot "$root" kernel-install add "$release" "/boot/vmlinuz-$release" \
    "/boot/initrd.img-$release" >>"$work/bootctl.log" 2>&1 \
    || { log "kernel-install add failed:"; cat "$work/bootctl.log" >&2; exit 1; }
  [ -s "$root/boot/efi/loader/entries/debian-$release.conf" ] \
    || { log "kernel-install wrote no loader entry:"; cat "$work/bootctl.log" >&2; exit 1; }
  umount "$root/proc"
  cp -a "$root/boot/efi" "$work/esp"
  umount "$root/boot/efi"
  rm -f "$work/bootctl.log"
}

assemble_systemd_boot_disk() {
  local esp_start_mib=1 esp_size_mib=128 root_size_mib=3071
  mkfs.vfat -n TEE-ESP -C "$work/esp.vfat" $((esp_size_mib * 1024)) >/dev/null
  mcopy -s -i "$work/esp.vfat" "$work"/esp/* ::/
  mke2fs -q -t ext4 -L tee-vm-root -d "$root" "$work/root.ext4" "${root_size_mib}M" >&2
  # One MiB at the end for GPT's backup header.
  truncate -s "$((esp_start_mib + esp_size_mib + root_size_mib + 1))M" "$work/disk.raw"
  printf 'label: gpt\nstart=%sMiB, size=%sMiB, type=U\nstart=%sMiB, size=%sMiB, type=L\n' "$esp_start_mib" \
    "$esp_size_mib" "$((esp_start_mib + esp_size_mib))" "$root_size_mib" | sfdisk -q "$work/disk.raw"
  dd if="$work/esp.vfat" of="$work/disk.raw" bs=1M seek="$esp_start_mib" conv=notrunc,sparse status=none
  dd if="$work/root.ext4" of="$work/disk.raw" bs=1M seek="$((esp_start_mib + esp_size_mib))" conv=notrunc,sparse \
    status=none
  rm -rf "$root" "$work/root.ext4" "$work/esp.vfat" "$work/esp"
}

log "debootstrap bookworm from $mirror with $packages (a few minutes)"
# DEBIAN_FRONTEND: grub-pc's postinst asks for install devices; there are none in a chroot (stage 4 installs).
DEBIAN_FRONTEND=noninteractive debootstrap --variant=minbase --include="$packages" bookworm "$root" "$mirror" \
  >"$work/debootstrap.log" 2>&1 || { log "debootstrap failed:"; tail -n 30 "$work/debootstrap.log" >&2; exit 1; }

ssh-keygen -q -t ed25519 -N '' -C confidential-tee-vm -f "$work/id_ed25519"
install -d -m 0700 "$root/root/.ssh"
install -m 0600 "$work/id_ed25519.pub" "$root/root/.ssh/authorized_keys"

echo tee-vm >"$root/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 tee-vm\n' >"$root/etc/hosts"
# No fsck of the root at boot (pass 0): systemd-fsck-root sat on the boot's critical chain (2-4 s under TCG), and
# a test VM's disk is a throwaway overlay, never repaired.
if [ "$variant" = grub ]; then
  printf '/dev/vda1 / ext4 defaults,errors=remount-ro 0 0\n' >"$root/etc/fstab"
else
  # No fsck of the ESP (pass 0): the image carries no fsck.vfat, and the boot stays short. The device wait is
  # a deadline for a hang, not the default 90 s: on a loaded host udev announced /dev/vda1 later than that and
  # the boot stopped in emergency mode ("Timed out waiting for device dev-vda1.device").
  printf '/dev/vda2 / ext4 defaults,errors=remount-ro 0 0\n%s\n' \
    '/dev/vda1 /boot/efi vfat umask=0077,x-systemd.device-timeout=20min 0 0' >"$root/etc/fstab"
fi
: >"$root/etc/machine-id"
printf 'PermitRootLogin prohibit-password\nUseDNS no\n' >"$root/etc/ssh/sshd_config.d/tee-vm.conf"
# The boot path stays short under TCG: only what the tests need starts.
# The address is set by udev the moment eth0 appears (ip, no daemon, no unit waiting on the device with a
# timeout a loaded host can miss): systemd-networkd took 13 s of the boot under TCG.
printf '#!/bin/sh\nset -e\n/usr/sbin/ip link set eth0 up\n/usr/sbin/ip addr replace 10.0.2.15/24 dev eth0\n/usr/sbin/ip route replace default via 10.0.2.2\n' \
  >"$root/usr/local/sbin/tee-vm-net"
chmod 0755 "$root/usr/local/sbin/tee-vm-net"
printf 'ACTION=="add", SUBSYSTEM=="net", KERNEL=="eth0", RUN+="/usr/local/sbin/tee-vm-net"\n' \
  >"$root/etc/udev/rules.d/90-tee-vm-net.rules"
chroot "$root" systemctl enable ssh.service >/dev/null 2>&1
# sshd's configuration test before every start (Debian's ExecStartPre, sshd -t) doubles its start under TCG: the
# configuration is this script's and never changes in the guest.
install -d "$root/etc/systemd/system/ssh.service.d"
printf '[Service]\nExecStartPre=\n' >"$root/etc/systemd/system/ssh.service.d/tee-vm.conf"
# modprobe@*: systemd loads these at every boot; the tests need none of them (each module load is an RSA
# signature check on an emulated CPU). The journal flush, utmp, random seed, sysusers, binfmt and the API file
# systems no test reads (hugepages, mqueue, debugfs, tracefs, configfs, fusectl) each cost about a second of the
# boot under TCG (systemd-analyze blame in the guest, 2026-11-28); sysusers' users exist since debootstrap.
for unit in apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer e2scrub_reap.service fstrim.timer \
  getty@tty1.service getty-static.service getty.target serial-getty@ttyS0.service \
  systemd-networkd.service systemd-networkd.socket systemd-networkd-wait-online.service logrotate.timer \
  dpkg-db-backup.timer man-db.timer systemd-tmpfiles-clean.timer modprobe@drm.service \
  modprobe@efi_pstore.service modprobe@dm_mod.service modprobe@loop.service systemd-pstore.service \
  systemd-journal-flush.service systemd-update-utmp.service systemd-update-utmp-runlevel.service \
  systemd-random-seed.service systemd-sysusers.service systemd-binfmt.service proc-sys-fs-binfmt_misc.automount \
  dev-hugepages.mount dev-mqueue.mount sys-kernel-debug.mount sys-kernel-tracing.mount sys-kernel-config.mount \
  sys-fs-fuse-connections.mount modprobe@configfs.service modprobe@fuse.service; do
  chroot "$root" systemctl mask "$unit" >/dev/null 2>&1 || true
done
# Drivers udev would load for q35's own devices that no test reads (AHCI, SMBus, watchdog, wireless rules).
printf 'blacklist %s\n' ahci i2c_i801 lpc_ich iTCO_wdt cfg80211 pcspkr serio_raw joydev \
  >"$root/etc/modprobe.d/tee-vm-trim.conf"
# Only the modules the boot needs in the initramfs: it is unpacked by an emulated CPU at every boot.
sed -i 's/^MODULES=.*/MODULES=list/' "$root/etc/initramfs-tools/initramfs.conf"
printf 'virtio_pci\nvirtio_blk\next4\n' >>"$root/etc/initramfs-tools/modules"
chroot "$root" update-initramfs -u -k all >"$work/initramfs.log" 2>&1 \
  || { log "update-initramfs failed:"; tail -n 20 "$work/initramfs.log" >&2; exit 1; }
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
if [ "$variant" = grub ]; then configure_grub; else configure_systemd_boot; fi

log "assembling disk.raw (mke2fs -d, sfdisk)"
if [ "$variant" = grub ]; then assemble_grub_disk; else assemble_systemd_boot_disk; fi
rm -f "$work/debootstrap.log" "$work/initramfs.log"
echo "$base_cmdline" >"$work/cmdline"

# Atomic publication, then trim older builds of this variant (and of the unnamed layout before the variants,
# debian-12-<key>): only those nobody uses. A test run holds a shared lock on <image>/.in-use while its VMs run
# and touches it (tests/vm/conftest.py), and another checkout's script (another key) may share this cache: a
# build removes another only when no run holds it and none used it for a day.
rm -rf "$image_dir"
mv "$work" "$image_dir"
trap - EXIT
touch "$image_dir/.in-use"
find "$cache_dir" -mindepth 1 -maxdepth 1 -type d ! -path "$image_dir" \
  \( -name "debian-12-$variant-*" -o -name 'debian-12-????????????' \) -print0 |
  while IFS= read -r -d '' stale; do
    in_use="$stale/.in-use"
    if [ -e "$in_use" ] && [ -n "$(find "$in_use" -mmin -1440)" ]; then continue; fi
    [ -e "$in_use" ] || : >"$in_use"
    # The exclusive lock is taken only when no run holds the shared one; held while the directory goes.
    flock -n -x "$in_use" rm -rf "$stale" || log "kept $stale: a test run is using it"
  done
log "image ready in $image_dir ($((SECONDS - start)) s, $(du -sh "$image_dir" | cut -f1) on disk)"
echo "$image_dir"
