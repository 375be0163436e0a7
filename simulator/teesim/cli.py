"""The ``teesim`` command line.

Subcommands live in modules listed in :data:`SUBCOMMAND_MODULES`; each exposes
``register(subparsers) -> None`` and sets ``func`` on its parser. The gRPC path (``teesim grpc``, written by
the gRPC engineer) registers itself the same way, so the CLI never imports layers it does not need.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# Optional modules are skipped when absent (e.g. a checkout without the gRPC path).
SUBCOMMAND_MODULES: tuple[str, ...] = (
    "teesim.kernel.cli",
    "teesim.fixtures.fleet",
    "teesim.report.cli",
    "teesim.grpc_run",
    "teesim.serve.cli",
)
OPTIONAL_MODULES: frozenset[str] = frozenset({"teesim.grpc_run", "teesim.serve.cli"})


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="teesim",
        description="Simulate TEE-key capacity on Kubernetes nodes: misc cgroup, kubelet, Kata, KubeVirt.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for name in SUBCOMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if name in OPTIONAL_MODULES and exc.name == name:
                continue
            raise
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, OSError) as exc:
        print(f"teesim {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
