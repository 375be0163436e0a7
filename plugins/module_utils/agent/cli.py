# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""``tee-key-agent``: keeps the node's kernel-sized TEE key pool on its Node (``tee_key_pool_mode: kernel``).

Run as ``python3 -m ansible_collections.confidential.tee.plugins.module_utils.agent.cli`` with the collection's
parent directory on ``PYTHONPATH``, or as the console script ``tee-key-agent``. Exit codes: 0 clean stop (SIGTERM,
SIGINT, or ``--once`` done), 2 bad arguments, 1 fatal (credentials unusable).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import signal
import socket
import sys
import threading

from ansible_collections.confidential.tee.plugins.module_utils.agent import decision, kube
from ansible_collections.confidential.tee.plugins.module_utils.agent.agent import Agent
from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import HostReader
from ansible_collections.confidential.tee.plugins.module_utils.host import misc_cgroup

COLLECTION_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
_VERSION_LINE = re.compile(r"^version:\s*['\"]?([0-9A-Za-z.+-]+)['\"]?\s*$", re.MULTILINE)


def collection_version(root: str = COLLECTION_ROOT) -> str:
    """The collection's version: MANIFEST.json of a built or installed collection, else galaxy.yml of a checkout."""
    try:
        with open(os.path.join(root, "MANIFEST.json"), encoding="utf-8") as handle:
            return str(json.load(handle)["collection_info"]["version"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    try:
        with open(os.path.join(root, "galaxy.yml"), encoding="utf-8") as handle:
            found = _VERSION_LINE.search(handle.read())
    except OSError:
        found = None
    return found.group(1) if found else "unknown"


def _reserve(text: str) -> tuple[str, int]:
    name, _equals, count = text.partition("=")
    misc = misc_cgroup.canonical_resource(decision.MISC_OF_POOL.get(name.strip(), name.strip()))
    if misc not in decision.POOL_RESOURCES or not count.strip().isdigit():
        names = ", ".join(list(decision.POOL_RESOURCES) + list(decision.MISC_OF_POOL) + ["snp"])
        raise argparse.ArgumentTypeError(f"{text!r}: expected RESOURCE=N with RESOURCE one of {names}, N >= 0")
    return misc, int(count)


def _interval(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.05 <= value <= 3600:
        raise argparse.ArgumentTypeError(f"{text!r}: expected seconds between 0.05 and 3600")
    return value


def parser() -> argparse.ArgumentParser:
    found = argparse.ArgumentParser(
        prog="tee-key-agent",
        description=(
            "Keep this node's TEE key pool (tdx.intel.com/keys, sev-snp.amd.com/esids) at what the kernel has free "
            "for Kubernetes: misc.capacity minus the keys held outside Kubernetes (misc.current minus the keys of "
            "this node's charged pods) minus --reserve. Written to the Node's status.capacity and allocatable with "
            "a ConfidentialTeeKeyPool condition; on doubt the pool shrinks, never grows."
        ),
    )
    found.add_argument("--node", default=os.environ.get("NODE_NAME") or socket.gethostname(), help="Node name")
    found.add_argument("--host-root", default="/", help="the host's root (its /sys/fs/cgroup is read); default /")
    found.add_argument("--kubeconfig", help="kubeconfig file (default: the pod's service account)")
    found.add_argument(
        "--interval",
        type=_interval,
        default=0.5,
        help="seconds between passes (default 0.5: the race window's p99 under 1 s)",
    )
    found.add_argument(
        "--reserve",
        type=_reserve,
        action="append",
        default=[],
        metavar="RESOURCE=N",
        help="keys kept for VMs outside Kubernetes (tdx=2, sev_es=4, snp=4 or the pool name); repeatable",
    )
    found.add_argument("--once", action="store_true", help="decide once, print the decision as JSON, exit")
    found.add_argument("--dry-run", action="store_true", help="decide and log, write nothing to the API server")
    found.add_argument("--log-format", choices=("text", "json"), default="text")
    found.add_argument("--version", action="version", version=f"tee-key-agent {collection_version()}")
    return found


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return json.dumps({"time": self.formatTime(record), "level": record.levelname, "msg": record.getMessage()})


def _logging(kind: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        _JsonFormatter() if kind == "json" else logging.Formatter("%(asctime)s %(levelname)s %(message)s")
    )
    root = logging.getLogger("tee-key-agent")
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)


def _client(args: argparse.Namespace, version: str) -> kube.KubeClient:
    credentials = kube.from_kubeconfig(args.kubeconfig) if args.kubeconfig else kube.in_cluster()
    return kube.KubeClient(credentials, user_agent=f"tee-key-agent/{version}")


def _say(stream, text: str) -> None:
    """One line to stdout or stderr (this is a program, not a module: no module.log here)."""
    stream.write(text + "\n")
    stream.flush()


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    _logging(args.log_format)
    if not os.path.isdir(args.host_root):
        _say(sys.stderr, f"tee-key-agent: --host-root {args.host_root} is not a directory")
        return 2
    version = collection_version()
    try:
        client = _client(args, version)
    except kube.KubeError as exc:
        if args.kubeconfig or not args.once:
            _say(sys.stderr, f"tee-key-agent: {exc}")
            return 1
        client = None  # --once outside a pod without --kubeconfig: decide from the kernel alone
    # The entry point: the one place the agent's host is made (a module gets its own from open_host).
    agent = Agent(args.node, HostReader(args.host_root), client, dict(args.reserve), dry_run=args.dry_run or args.once)
    if args.once:
        agent.refresh_node(force=True)
        _say(
            sys.stdout,
            json.dumps(dict(agent.step().as_dict(), node=args.node, version=version), indent=2, sort_keys=True),
        )
        return 0
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    logging.getLogger("tee-key-agent").info(
        "tee-key-agent %s on node %s: host root %s, API %s, every %ss%s",
        version,
        args.node,
        args.host_root,
        client.credentials.source,
        args.interval,
        " (dry run)" if args.dry_run else "",
    )
    agent.run(stop, args.interval)
    client.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
