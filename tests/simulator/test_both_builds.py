"""``make pytest`` runs every test of serve, the gRPC kubelet, the real plugins and the CLI on both builds.

The first run is TEESIM_NATIVE=1 (the native build, what ``make demo`` installs; a stale build is an
error), the second TEESIM_NATIVE=0 over ``BOTH_BUILDS_TESTS`` in the Makefile. A test file that drives any
of those and is missing from the list would run on one build only: issue 27's bug (the compiled
simulation dropped serve's kubelet) hid behind tests that ran on the source only.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# What a test of serve, the gRPC kubelet, the real plugins or the CLI imports or runs.
# (teesim.plugins.models are the in-process models: compiled, and tested with the simulation.)
DRIVES = re.compile(r"teesim\.(serve|kubelet\.server|plugins\.(?!models)|cli\b|grpc_run)|teesim_node|\"teesim\"")


def _both_builds() -> list[str]:
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    match = re.search(r"^BOTH_BUILDS_TESTS := ((?:.*\\\n)*.*)$", makefile, flags=re.M)
    assert match, "the Makefile names BOTH_BUILDS_TESTS"
    return match.group(1).replace("\\\n", " ").split()


def test_the_listed_paths_exist():
    missing = [p for p in _both_builds() if not (REPO / p).exists()]
    assert not missing


def test_every_test_of_serve_grpc_plugins_and_the_cli_runs_on_both_builds():
    listed = [REPO / p for p in _both_builds()]
    drivers = [
        path
        for path in sorted((REPO / "tests" / "simulator").rglob("test_*.py"))
        if DRIVES.search(path.read_text(encoding="utf-8"))
    ]
    uncovered = [str(p.relative_to(REPO)) for p in drivers if not any(p == c or c in p.parents for c in listed)]
    # Run once, on purpose: the native build's own tests set the build they compare, the docs example
    # (45 s) is the first run's; the docs' 30-seed sweep (2,700 runs) too, whose every scenario and strategy
    # test_native compares between the builds run by run; this file and test_layers read sources only.
    once = {
        "tests/simulator/report/test_sweep_docs.py",
        "tests/simulator/test_native.py",
        "tests/simulator/test_docs_serve.py",
        "tests/simulator/test_both_builds.py",
        "tests/simulator/test_layers.py",
    }
    assert sorted(set(uncovered) - once) == []


def test_the_makefile_makes_a_stale_native_build_an_error():
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    assert "TEESIM_NATIVE=1 $(BIN)/python -m pytest" in makefile
    assert "TEESIM_NATIVE=0 $(BIN)/python -m pytest -n 2 --dist loadfile $(BOTH_BUILDS_TESTS)" in makefile
