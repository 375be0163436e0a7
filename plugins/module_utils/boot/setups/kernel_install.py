# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""Boot setup ``kernel_install``: ``/etc/kernel/cmdline``, which ``kernel-install add`` copies into the entry.

The file is edited in place (every untouched byte kept), proven, and ``kernel-install add`` then regenerates the
running kernel's entry where the host's own kernel-install would put it (:mod:`boot.kernel_install_layout`); the
entry itself is read afterwards (:mod:`boot.loader_entry`), since kernel-install exits 0 whatever its plugins did.
"""

from __future__ import annotations

import os

from ansible_collections.confidential.tee.plugins.module_utils.boot import kernel_install_layout, loader_entry
from ansible_collections.confidential.tee.plugins.module_utils.boot.cmdline_edit import edit_cmdline, unmet
from ansible_collections.confidential.tee.plugins.module_utils.boot.requests import CmdlineError, Request, combine
from ansible_collections.confidential.tee.plugins.module_utils.boot.setups import (
    Action,
    Detection,
    Plan,
    find_tool,
    present_or_absent,
    read_boot_file,
    write_action,
)
from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import HostReader
from ansible_collections.confidential.tee.plugins.module_utils.common.process import run_bounded
from ansible_collections.confidential.tee.plugins.module_utils.host.cmdline import kernel_args, tokenize

NAME = "kernel_install"
CMDLINE = "/etc/kernel/cmdline"


def detect(reader: HostReader) -> Detection:
    """A host with ``/etc/kernel/cmdline`` (the last setup checked: BLS and ostree hosts may have one too)."""
    found = bool(reader.isfile(CMDLINE))
    return Detection(found, [present_or_absent(CMDLINE, found)])


def plan(reader: HostReader, requests: list[Request], runner=run_bounded) -> Plan:
    """The file edited in place, then ``kernel-install add`` for the running kernel; ``runner`` is not used here."""
    present, absent = combine(requests)
    path = CMDLINE
    text = read_boot_file(reader, path)
    if text is None:
        raise CmdlineError(f"boot setup 'kernel_install' needs {reader.path(path)}, which is missing")
    new = edit_cmdline(text, present, absent)
    if new and not new.endswith("\n"):
        new += "\n" if text.endswith("\n") or not text else ""
    before = [t.raw for t in tokenize(text)]
    after = [t.raw for t in tokenize(new)]
    action = write_action(path, text, new, "kernel-install command line")
    result = Plan("kernel_install", [action] if action else [], before, after, path)
    result.readback = lambda host, _run: [t.raw for t in tokenize(read_boot_file(host, path) or "")]
    result.before_tools = lambda executor: executor.readback_problems(result)[1]
    if action:
        _add_kernel_install(reader, result, path)
    return result


def _add_kernel_install(reader: HostReader, result: Plan, path: str, env=None) -> None:
    release = (reader.read_text("/proc/sys/kernel/osrelease", record=False) or "").strip()
    tool = find_tool(reader, "kernel-install")
    argv = _kernel_install_add(reader, release) if tool else None
    if not (tool and argv):
        result.warnings.append(
            f"{path} is read when a kernel is installed; no kernel-install or vmlinuz for the running "
            f"kernel {release or '(unknown)'} was found, so run 'kernel-install add' or reinstall the "
            "kernel for the change to reach the boot entry"
        )
        return
    # kernel-install runs with this process's environment (through chroot too), so it decides with it.
    layout = kernel_install_layout.detect(reader, tool, os.environ if env is None else env, image=argv[2])
    action = Action("command", f"regenerate the boot entry of {release}", argv=[tool, *argv])
    # kernel-install rewrites the running kernel's entry: the entries are kept and restored on failure, wherever
    # it keeps them (Debian mounts the ESP at /boot/efi), and the entry it will create is removed again.
    roots = dict.fromkeys([*loader_entry.BOOT_ROOTS, *([layout.boot_root] if layout.boot_root else [])])
    action.backs_up = [
        f"{boot}/loader/entries/{name}"
        for boot in roots
        for name in reader.listdir(f"{boot}/loader/entries") or []
        if name.endswith(".conf")
    ]
    if layout.writes_entry:
        tries = kernel_install_layout.first_line(reader, "/etc/kernel/tries")
        names = layout.entry_names(release, tries if tries and tries.isdigit() else None)
        action.backs_up += [f"{layout.boot_root}/loader/entries/{name}" for name in names]
    result.actions.append(action)
    if layout.writes_entry and layout.token:
        result.after_tools = _entry_check(result, layout, release, tool)
    elif layout.writes_entry:
        result.warnings.append(
            f"kernel-install writes a Type #1 entry into {layout.boot_root}/loader/entries ({layout.why()}), but names "
            "it after a machine ID it generates afresh on every run (no /etc/machine-id), so the entry could not be "
            "confirmed: initialize /etc/machine-id or set /etc/kernel/entry-token"
        )
    else:
        # other, uki or a bypass: kernel-install writes no Type #1 entry, by design; say so rather than fail.
        result.warnings.append(
            f"kernel-install uses layout={layout.layout} on this host ({layout.why()}): it writes no Type #1 boot "
            "entry, so the new command line could not be confirmed in a loader entry; check what your boot loader "
            "reads. If systemd-boot reads Type #1 entries from an ESP that is not mounted, mount it (for example "
            "'mount /boot/efi') and run again"
        )


def _entry_check(result: Plan, layout: kernel_install_layout.Layout, release: str, tool: str):
    """After ``kernel-install add`` on a ``bls`` layout: the running kernel's entry must carry the planned line.

    kernel-install exits 0 whatever its plugins did, so only the entry itself, where and under the name it was
    decided (:mod:`kernel_install_layout`), shows that the next boot gets the new line (:mod:`loader_entry`).
    """
    tokens, roots = [layout.token or ""], (layout.boot_root,)

    def problems(executor) -> list[str]:
        entries = loader_entry.find_entries(executor.host.fresh(), tokens, release, roots)
        where = loader_entry.looked_in(tokens, release, roots)
        why = f"kernel-install decides layout=bls there: {layout.why()}"
        if not entries:
            return [
                f"'{tool} add' exited 0 but wrote no boot entry for {release}: looked for {where}; {why}. Check "
                "its plugins in /etc/kernel/install.d and /usr/lib/kernel/install.d (90-loaderentry.install writes "
                "the entry) and run 'kernel-install --verbose add' by hand"
            ]
        found = []
        for entry, options in entries:
            args = [t.raw for t in kernel_args(tokenize(options))] if options is not None else None
            wrong = ["unreadable"] if args is None else unmet(result.configured, args, result.present, result.absent)
            found += [f"{entry} ({'; '.join(wrong)})"] if wrong else []
        if not found:
            return []
        planned = " ".join(result.configured) or "(nothing)"
        return [
            f"'{tool} add' exited 0 but the boot entry does not carry the planned command line {planned}: "
            f"{', '.join(found)}; {why}"
        ]

    return problems


def _kernel_install_add(reader: HostReader, release: str) -> list[str] | None:
    """``kernel-install``'s arguments that regenerate the running kernel's entry, or None without its image.

    The image is where the distribution keeps it: ``/usr/lib/modules/<release>/vmlinuz`` (Fedora, Arch, ...) or
    Debian's ``/boot/vmlinuz-<release>``. Debian builds the initramfs outside kernel-install, so its own hook
    passes it (systemd-boot 252.39-1~deb12u2, ``/etc/initramfs/post-update.d/systemd-boot``:
    ``kernel-install add "$1" "/boot/vmlinuz-$1" "$2"``); an entry regenerated without it would not boot.
    """
    if not release or "/" in release:
        return None
    for directory in ("usr/lib/modules", "lib/modules"):
        if reader.isfile(f"/{directory}/{release}/vmlinuz"):
            return ["add", release, f"/{directory}/{release}/vmlinuz"]
    if not reader.isfile(f"/boot/vmlinuz-{release}"):
        return None
    initrd = f"/boot/initrd.img-{release}"
    return ["add", release, f"/boot/vmlinuz-{release}", *([initrd] if reader.isfile(initrd) else [])]
