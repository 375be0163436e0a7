"""`teesim --help` and every subcommand's `--help` render (argparse formats help strings with `%`)."""

from __future__ import annotations

import argparse
import contextlib
import io

import pytest
from teesim.cli import build_parser, main


def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command path reachable from ``parser``, found in the parser itself (no hard-coded list)."""
    found = [path]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                found += _commands(child, (*path, name))
    return found


COMMANDS = _commands(build_parser())


def test_the_walk_finds_the_subcommands() -> None:
    assert ("run",) in COMMANDS and ("sweep",) in COMMANDS and len(COMMANDS) > 5


@pytest.mark.parametrize("path", COMMANDS, ids=lambda path: " ".join(path) or "teesim")
def test_help_renders(path: tuple[str, ...]) -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exited:
        main([*path, "--help"])
    assert exited.value.code == 0
    assert out.getvalue().startswith("usage: teesim")
