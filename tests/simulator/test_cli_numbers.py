"""Every numeric option of teesim's command lines refuses a value outside its range: exit 2, the option
named, before anything starts (issue 27: ``teesim serve --registration-timeout -5`` was accepted)."""

from __future__ import annotations

import argparse
import importlib

import pytest
from teesim._args import MAX_SEED, integer, positive, seconds
from teesim.cli import build_parser, main

SERVE = ["serve", "serve-double-pool-tdx", "--root", "/nonexistent-never-created/root"]
REFUSED = [
    (SERVE, "--registration-timeout", ["-5", "0", "nan", "inf", "1e12", "x"]),
    (SERVE, "--seed", ["-1", str(MAX_SEED + 1), "1.5", "x"]),
    (["run", "serve-double-pool-tdx"], "--seed", ["-1", "x"]),
    (["run", "quick", "--real-node"], "--pace", ["0", "-2", "nan", "inf", "1e7", "x"]),
    (["sweep", "serve-double-pool-tdx"], "--workers", ["0", "-2", "100000"]),
    (["grpc"], "--changes", ["0", "-1", "1000001"]),
    (["grpc"], "--capacity", ["1", "0", "99999"]),
    (["grpc"], "--poll-interval", ["0", "-0.1", "nan", "61"]),
    (["grpc"], "--seed", ["-3"]),
    (["fleet", "build", "--out", "/nonexistent-never-created"], "--copies", ["0", "-1", "100001"]),
    (["node", "build", "--out", "/nonexistent-never-created"], "--ciphertext-hiding-asids", ["-1"]),
]


@pytest.mark.parametrize(
    ("argv", "option", "value"),
    [(argv, option, value) for argv, option, values in REFUSED for value in values],
    ids=lambda x: x if isinstance(x, str) else None,
)
def test_an_out_of_range_number_is_refused_with_exit_2(capsys, argv, option, value):
    with pytest.raises(SystemExit) as info:
        main([*argv, f"{option}={value}"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {option}: expected " in err and repr(value) in err


def _bare_numbers() -> list[str]:
    """Options of any subcommand whose argparse type is a bare ``int`` or ``float`` (no range)."""
    found = []

    def walk(parser: argparse.ArgumentParser, path: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, f"{path} {name}")
            elif action.type in (int, float):
                found.append(f"teesim{path} {action.option_strings or action.dest}")

    walk(build_parser(), "")
    return found


def test_no_option_of_the_cli_takes_a_number_without_a_range():
    """Every numeric option uses teesim._args' types (a new one gets a range, and a row in REFUSED)."""
    assert _bare_numbers() == []
    options = {option for _, option, _ in REFUSED}
    assert {"--registration-timeout", "--seed", "--workers", "--copies", "--poll-interval"} <= options


def test_the_types_accept_their_range():
    assert integer(1, 3)("3") == 3 and integer(0)("0") == 0
    assert seconds()("0.5") == 0.5 and seconds(60.0)("60") == 60.0
    assert positive(10.0)("0.25") == 0.25 and positive(10.0)("10") == 10.0
    with pytest.raises(argparse.ArgumentTypeError, match="an integer from 1 to 3, got '4'"):
        integer(1, 3)("4")


@pytest.mark.parametrize(
    ("plugin", "option", "value"),
    [
        ("static", "--poll-interval", "-1"),
        ("static", "--watch-interval", "0"),
        ("reconciling", "--poll-interval", "nan"),
        ("reconciling", "--min-list-interval", "-0.5"),
        ("reconciling", "--list-refresh", "inf"),
        ("unified", "--reserve", "-2"),
    ],
)
def test_the_plugins_refuse_out_of_range_numbers(capsys, plugin, option, value):
    module = importlib.import_module(f"teesim.plugins.{plugin}")
    with pytest.raises(SystemExit) as info:
        module.main(["--host-root", "/nonexistent-never-created", f"{option}={value}"])
    assert info.value.code == 2
    assert f"argument {option}: expected " in capsys.readouterr().err
