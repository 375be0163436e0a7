"""`teesim` and every subcommand: `--help` renders, every option and command has help text, a command line that
stops before a subcommand lists them, `--version` is the package's (argparse formats help strings with `%`)."""

from __future__ import annotations

import argparse
import contextlib
import io
from importlib import metadata

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


def _subcommands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], list[str]]:
    """Every command path that has subcommands -> their names (``()`` is ``teesim`` itself)."""
    found: dict[tuple[str, ...], list[str]] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found[path] = list(action.choices)
            for name, child in action.choices.items():
                found.update(_subcommands(child, (*path, name)))
    return found


_PARENTS = _subcommands(build_parser())


def test_the_walk_finds_the_subcommands() -> None:
    assert ("run",) in COMMANDS and ("sweep",) in COMMANDS and len(COMMANDS) > 5
    assert () in _PARENTS and ("node",) in _PARENTS


@pytest.mark.parametrize("path", COMMANDS, ids=lambda path: " ".join(path) or "teesim")
def test_help_renders(path: tuple[str, ...]) -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exited:
        main([*path, "--help"])
    assert exited.value.code == 0
    assert out.getvalue().startswith("usage: teesim")


def _unhelped(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[str]:
    """Every argument and subcommand of the tree whose help is missing or empty, as ``command: option``."""
    missing = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            listed = {choice.dest: choice.help for choice in action._choices_actions}
            for name, child in action.choices.items():
                if not (listed.get(name) or "").strip():
                    missing.append(f"{' '.join(('teesim', *path))}: command {name}")
                missing += _unhelped(child, (*path, name))
        elif not (action.help or "").strip():
            names = "/".join(action.option_strings) or action.dest
            missing.append(f"{' '.join(('teesim', *path))}: {names}")
    return missing


def test_every_option_and_command_has_help() -> None:
    assert _unhelped(build_parser()) == []


def test_the_help_walk_finds_an_option_without_help() -> None:
    parser = argparse.ArgumentParser(prog="teesim")
    sub = parser.add_subparsers(dest="command")
    run = sub.add_parser("run", help="run")
    run.add_argument("--seed", help="the seed")
    run.add_argument("--quiet", action="store_true")
    sub.add_parser("bare")
    assert _unhelped(parser) == ["teesim run: --quiet", "teesim: command bare"]


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(argv)
        except SystemExit as exited:
            status = int(exited.code or 0)
    return status, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("path", list(_PARENTS), ids=lambda path: " ".join(("teesim", *path)))
def test_a_command_line_that_stops_before_a_subcommand_lists_them(path: tuple[str, ...]) -> None:
    status, out, err = _run(list(path))
    assert status == 2 and out == ""
    assert err.startswith(f"usage: {' '.join(('teesim', *path))}")
    for name in _PARENTS[path]:
        assert f"    {name} " in err or f"    {name}\n" in err, f"{name} not listed:\n{err}"


def test_version_is_the_package_metadata() -> None:
    status, out, _ = _run(["--version"])
    assert status == 0
    assert out == f"teesim {metadata.version('confidential-tee')}\n"
