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
from functools import partial
from importlib import metadata

# Optional modules are skipped when absent (e.g. a checkout without the gRPC path).
SUBCOMMAND_MODULES: tuple[str, ...] = (
    "teesim.kernel.cli",
    "teesim.fixtures.fleet",
    "teesim.report.cli",
    "teesim.grpc_run",
    "teesim.serve.cli",
)
OPTIONAL_MODULES: frozenset[str] = frozenset({"teesim.grpc_run", "teesim.serve.cli"})
DISTRIBUTION = "confidential-tee"


def version() -> str:
    """The installed distribution's version (``pyproject.toml``), or why there is none."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return f"unknown ({DISTRIBUTION} is not installed: pip install -e .)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="teesim",
        description="Simulate TEE-key capacity on Kubernetes nodes: misc cgroup, kubelet, Kata, KubeVirt.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if name in OPTIONAL_MODULES and exc.name == name:
                continue
            raise
        module.register(subparsers)
    _help_without_a_command(parser)
    return parser


def _show_help(parser: argparse.ArgumentParser, _args: argparse.Namespace) -> int:
    parser.print_help(sys.stderr)
    return 2  # argparse's status for a command line missing something


def _help_without_a_command(parser: argparse.ArgumentParser) -> None:
    """``teesim`` or ``teesim node`` alone print their commands instead of argparse's bare "required" error.

    A subcommand's own defaults replace its parent's, so only a command line that stops at a parser with
    subcommands reaches ``_show_help``.
    """
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            action.required = False
            parser.set_defaults(func=partial(_show_help, parser))
            for child in action.choices.values():
                _help_without_a_command(child)


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
