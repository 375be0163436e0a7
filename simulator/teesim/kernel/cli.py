"""``teesim node build``: write a simulated host tree to a real directory.

The tree is what the collection's modules (``host_root=DIR``), ``make demo`` and the out-of-process
device plugins read. Usage given with ``--usage`` is charged through the kernel model to
``--usage-cgroup`` (default ``machine.slice``, where libvirt puts VMs), so every file, including
``misc.peak`` and the children's ``misc.current`` an old kernel relies on, is consistent.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
from pathlib import Path
from typing import Any

from teesim._args import integer
from teesim._collection import tee_registry
from teesim.kernel.backends import NodeWriter, RealDirBackend
from teesim.kernel.node import CGROUP_ROOT, DEFAULT_VENDOR, Node, NodeSpec, parse_assignments
from teesim.kernel.profiles import PROFILES, get_profile


def build_node_tree(
    out: Path,
    *,
    profile: str = "current",
    vendor: str = DEFAULT_VENDOR,
    capacity: dict[str, int] | None = None,
    usage: dict[str, int] | None = None,
    usage_cgroup: str = "machine.slice",
    name: str = "node-1",
    charges: list[tuple[str, str, int]] | None = None,
    **extras: Any,
) -> Node:
    """Build a node, charge ``usage`` to ``usage_cgroup`` and every ``(cgroup, resource, amount)`` of
    ``charges``, write it under ``out``; returns the node. ``extras`` are further :class:`NodeSpec` fields
    (``registers``, ``tdx_misc``, ``kvm_tdx``, ``pci``, ``mktme_keyids``)."""
    spec = NodeSpec(name=name, profile=get_profile(profile), vendor=vendor, capacity=capacity or None, **extras)
    node = Node(spec)
    plan = [(usage_cgroup, resource, amount) for resource, amount in (usage or {}).items()] + list(charges or [])
    if plan and node.misc is None:
        raise ValueError(f"profile {profile!r} has no misc controller, so --usage cannot be charged")
    for cgroup, resource, amount in plan:
        assert node.misc is not None
        node.misc.ensure_cgroup(cgroup)
        node.misc.try_charge(cgroup, resource, amount)
    files = node.files()
    backend = RealDirBackend(out)
    # A rebuilt tree must not keep misc files of cgroups from an earlier build (readers walk them all).
    cgroup_dir = out / CGROUP_ROOT
    if cgroup_dir.is_dir():
        for stale in sorted(cgroup_dir.rglob("misc.*")):
            relpath = str(stale.relative_to(out))
            if relpath not in files:
                backend.remove(relpath)
    NodeWriter(backend).sync(files)
    for relpath, (offset, data) in node.registers().items():
        backend.write_at(relpath, offset, data)
    for relpath, target in node.links().items():
        backend.symlink(relpath, target)
    return node


def build_pod_view(out: Path, self_cgroup: str = "/", resources: tuple[str, ...] = ("tdx",)) -> None:
    """What a container sees at ``/sys/fs/cgroup`` without the host's root cgroup: its own (non-root) cgroup, with
    ``misc.current``/``misc.max``/``misc.events`` and ``cgroup.type`` but no ``misc.capacity`` (kernel/cgroup/
    misc.c: ``capacity`` only on the root), and ``/proc/self/cgroup`` as ``0::<self_cgroup>`` ("/" under its own
    cgroup namespace, the real path when the runtime bind-mounted the cgroup)."""
    cgroup = out / CGROUP_ROOT
    cgroup.mkdir(parents=True, exist_ok=True)
    (cgroup / "cgroup.controllers").write_text("cpuset cpu io memory pids misc\n")
    (cgroup / "cgroup.type").write_text("domain\n")
    for name, line in (("misc.current", "{} 0"), ("misc.max", "{} max"), ("misc.events", "{}.max 0")):
        (cgroup / name).write_text("".join(line.format(r) + "\n" for r in resources))
    (out / "proc/self").mkdir(parents=True, exist_ok=True)
    (out / "proc/self/cgroup").write_text(f"0::{self_cgroup}\n")


def _cmd_build(args: argparse.Namespace) -> int:
    node = build_node_tree(
        Path(args.out),
        profile=args.profile,
        vendor=args.vendor,
        capacity=parse_assignments(args.capacity, "--capacity"),
        usage=parse_assignments(args.usage, "--usage"),
        usage_cgroup=args.usage_cgroup,
        name=args.name,
        registers=args.registers,
        tdx_misc=args.tdx_misc,
        kvm_tdx=args.kvm_tdx,
        ciphertext_hiding_asids=args.ciphertext_hiding_asids,
    )
    misc = node.misc
    summary = (
        ", ".join(f"{r} {misc.usage(r)}/{misc.capacity(r)}" for r in misc.resources()) if misc else "no misc controller"
    )
    print(f"wrote {args.out}: {node.name}, kernel profile {args.profile}, {args.vendor}, {summary}")
    return 0


def _cmd_kernel(args: argparse.Namespace) -> int:
    from teesim.kernel.service import KernelService  # the socket server only where it is asked for

    root, sock = Path(args.root), Path(args.socket)
    node = build_node_tree(
        root,
        vendor=args.vendor,
        capacity=parse_assignments(args.capacity, "--capacity"),
        usage=parse_assignments(args.usage, "--usage"),
        name=args.name,
    )
    service = KernelService(node, root, cgroup_prefix=args.cgroup_prefix)

    def ready() -> None:
        print(f"teesim kernel: serving {node.name}'s misc tree at {root} on {sock}", flush=True)

    # SIGTERM (the node harness stopping) ends the loop through SystemExit, so the socket is removed.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    with contextlib.suppress(KeyboardInterrupt):
        service.serve(sock, ready=ready)
    return 0


def _add_kernel_parser(node_sub: Any) -> None:
    kernel = node_sub.add_parser(
        "kernel",
        help="serve a node's misc tree to real guests: launches over a unix socket, charged to the caller's cgroup",
    )
    kernel.add_argument("--root", required=True, help="directory the node's tree is written to (created)")
    kernel.add_argument("--socket", required=True, help="unix socket the guests connect to")
    kernel.add_argument(
        "--vendor", choices=tee_registry.VENDORS, default=DEFAULT_VENDOR, help="CPU vendor (default: %(default)s)"
    )
    kernel.add_argument("--capacity", action="append", metavar="RES=N", help="misc capacity (repeatable)")
    kernel.add_argument("--usage", action="append", metavar="RES=N", help="keys already in use by external VMs")
    kernel.add_argument("--name", default="node-1", help="host name")
    kernel.add_argument(
        "--cgroup-prefix", default="", help="the kubelet's cgroupRoot: removed from the callers' cgroup paths"
    )
    kernel.set_defaults(func=_cmd_kernel)


def register(subparsers: Any) -> None:
    node = subparsers.add_parser("node", help="simulated host trees")
    node_sub = node.add_subparsers(dest="node_command", metavar="ACTION")
    node_sub.required = True
    build = node_sub.add_parser("build", help="write a simulated host tree to a directory")
    build.add_argument("--profile", choices=sorted(PROFILES), default="current", help="kernel profile")
    build.add_argument(
        "--vendor", choices=tee_registry.VENDORS, default=DEFAULT_VENDOR, help="CPU vendor (default: %(default)s)"
    )
    build.add_argument(
        "--capacity",
        action="append",
        metavar="RES=N",
        help="misc capacity (repeatable; default intel tdx=63, amd sev=410 sev_es=99; snp means sev_es)",
    )
    build.add_argument("--usage", action="append", metavar="RES=N", help="keys already in use (repeatable)")
    build.add_argument("--usage-cgroup", default="machine.slice", help="cgroup charged with --usage")
    build.add_argument("--name", default="node-1", help="host name")
    build.add_argument(
        "--registers",
        action="store_true",
        help="also write dev/cpu/0/msr (MSR 0x87 TDX KeyIDs) or dev/cpu/0/cpuid (leaf 0x8000001F ASIDs)",
    )
    build.add_argument(
        "--no-tdx-misc",
        dest="tdx_misc",
        action="store_false",
        help="a kernel with KVM TDX but without the tdx misc resource (vendor backport): keys are not counted",
    )
    build.add_argument(
        "--kvm-tdx",
        choices=("auto", "Y", "N", "absent"),
        default="auto",
        help="kvm_intel tdx parameter (auto: Y when there are TDX keys; absent: a kernel without KVM TDX)",
    )
    build.add_argument(
        "--ciphertext-hiding-asids",
        type=integer(0),
        metavar="N",
        help="AMD: kvm_amd.ciphertext_hiding_asids (6.18+): SNP ASIDs 1..N, SEV-ES the rest of sev_es (0: off; "
        "default: a kernel without the parameter)",
    )
    build.add_argument("--out", required=True, help="directory to write (created; existing files replaced)")
    build.set_defaults(func=_cmd_build)
    _add_kernel_parser(node_sub)
