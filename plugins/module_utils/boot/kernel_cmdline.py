# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""Kernel-argument engine, the entry: parse the requests, pick the boot setup, plan; then execute and verify.

Pure standard library so that the module, the simulator and tests share one implementation. The parts live in
their own modules and are re-exported here for callers:

* :mod:`boot.requests`: the ``requests`` option checked and combined (:func:`parse_requests`, :func:`combine`);
* :mod:`boot.cmdline_edit`: whether a command line meets a request, and the edit that makes it;
* :mod:`boot.setups`: the one interface of a boot setup, and one module per setup (``grub``, ``bls``,
  ``kernel_install``, ``ostree``), listed below in :data:`BOOT_SETUPS`;
* :mod:`boot.executor`: :class:`Executor`, the one place where a plan's actions take effect (and only outside
  check mode), and :func:`verify`, which reads the host again afterwards so that success is reported only when
  the boot configuration really says what was asked.
"""

from __future__ import annotations

from ansible_collections.confidential.tee.plugins.module_utils.boot.cmdline_edit import edit_cmdline, satisfied
from ansible_collections.confidential.tee.plugins.module_utils.boot.executor import Executor, credential_values, verify
from ansible_collections.confidential.tee.plugins.module_utils.boot.requests import (
    CmdlineError,
    Request,
    check_name,
    combine,
    parse_arg,
    parse_request,
    parse_requests,
)
from ansible_collections.confidential.tee.plugins.module_utils.boot.setups import (
    BootSetup,
    Plan,
    bls,
    grub,
    kernel_install,
    ostree,
)
from ansible_collections.confidential.tee.plugins.module_utils.boot.setups.ostree import OSTREE_STAGED, ostree_pending
from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import HostReader
from ansible_collections.confidential.tee.plugins.module_utils.common.process import run_bounded
from ansible_collections.confidential.tee.plugins.module_utils.host.cmdline import parse_arg_text, tokenize

__all__ = [
    "OSTREE_STAGED",
    "SETUPS",
    "CmdlineError",
    "Executor",
    "Plan",
    "Request",
    "combine",
    "credential_values",
    "detect_setup",
    "edit_cmdline",
    "managed_running",
    "ostree_pending",
    "parse_arg",
    "parse_requests",
    "plan",
    "plan_requests",
    "reboot_required",
    "running_cmdline",
    "satisfied",
    "verify",
]

# Every boot setup, in the order users see them (the module's boot_setup choices after auto).
BOOT_SETUPS: tuple[BootSetup, ...] = (grub, bls, kernel_install, ostree)
SETUPS = tuple(setup.NAME for setup in BOOT_SETUPS)
# The order detection asks them: an ostree host has BLS entries and maybe GRUB files, a BLS host with grubby may
# have /etc/default/grub and /etc/kernel/cmdline, and a GRUB host may have /etc/kernel/cmdline. The first that
# matches wins; every one is asked, so that the message lists everything that was looked at.
DETECTION_ORDER: tuple[BootSetup, ...] = (ostree, bls, grub, kernel_install)


def detect_setup(reader: HostReader) -> tuple[str | None, list[str]]:
    """Pick the boot setup from the files present; also return what was looked at, for error messages."""
    detections = [(setup.NAME, setup.detect(reader)) for setup in DETECTION_ORDER]
    found = [line for _name, detection in detections for line in detection.found]
    return next((name for name, detection in detections if detection.matches), None), found


def plan(
    host: HostReader,
    present: list[str],
    absent: list[str],
    name: str = "confidential-tee",
    setup: str = "auto",
    runner=run_bounded,
) -> Plan:
    """Parse the request, detect (or check) the boot setup and plan the actions."""
    check_name(name)
    want, drop = parse_request(present, absent)
    return plan_requests(host, [Request(name, want, drop)], setup, runner)


def plan_requests(host: HostReader, requests: list[Request], setup: str = "auto", runner=run_bounded) -> Plan:
    """Plan several callers' requests as one change: every file they need written, the boot updated once.

    GRUB keeps one drop-in per request; the other setups hold one command line, edited with all of them at once.
    """
    want, drop = combine(requests)
    if setup == "auto":
        detected, found = detect_setup(host)
        if detected is None:
            raise CmdlineError(
                f"no supported boot setup under host_root {host.host_root}: found {'; '.join(found)}. Supported: "
                "ostree/bootc (/run/ostree-booted), BLS with grubby, Debian/Ubuntu GRUB (/etc/default/grub), "
                "kernel-install (/etc/kernel/cmdline); set boot_setup explicitly if detection is wrong"
            )
        setup = detected
    chosen = next((candidate for candidate in BOOT_SETUPS if setup == candidate.NAME), None)
    if chosen is None:
        raise CmdlineError(f"unknown boot setup {setup!r}; choose one of auto, {', '.join(SETUPS)}")
    result = chosen.plan(host, requests, runner)
    result.present, result.absent = want, drop
    return result


def running_cmdline(host: HostReader) -> list[str] | None:
    """The running kernel's arguments (``/proc/cmdline`` of the host), ``None`` when it cannot be read."""
    result = host.read("/proc/cmdline", record=False)
    if result.data is None:
        return None
    return [t.raw for t in tokenize(result.data.decode("latin-1"))]


def reboot_required(running: list[str] | None, present: list[str], absent: list[str]) -> bool:
    """True when the running kernel does not have what was requested (configured differs from running)."""
    if running is None:
        return False
    return not satisfied(running, [parse_arg(p) for p in present], [parse_arg(a) for a in absent])


def managed_running(running: list[str] | None, present: list[str], absent: list[str]) -> list[str] | None:
    """The running arguments this request is about; the rest of the line may carry credentials."""
    if running is None:
        return None
    keys = {parse_arg(raw).key for raw in [*present, *absent]}
    return [raw for raw in running if parse_arg_text(raw).key in keys]
