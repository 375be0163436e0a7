"""teesim._native: the compiled build runs only while it matches the source, and reports what the source does."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import teesim._native as native
from teesim.sim.scenario import bundled_scenarios
from teesim.strategies import STRATEGIES

SIMULATOR = Path(__file__).resolve().parents[2] / "simulator"
TAG = sys.implementation.cache_tag
FRESH = {"a.py": "1", "b/c.py": "2"}


def _manifest(**changes: object) -> dict:
    return {"cache_tag": TAG, "mypy": "2.4.1", "modules": list(native.MODULES), "sources": dict(FRESH), **changes}


# -- the decision (a pure function) ------------------------------------------------------------------


def test_a_fresh_build_runs() -> None:
    decision = native.decide(None, _manifest(), dict(FRESH), TAG)
    assert decision.native and "mypyc 2.4.1" in decision.reason


def test_an_edited_added_or_removed_source_keeps_the_source_build_and_names_the_file() -> None:
    assert native.decide(None, _manifest(), {**FRESH, "b/c.py": "3"}, TAG) == native.Decision(
        False, "the source changed since make native: b/c.py"
    )
    assert not native.decide(None, _manifest(), {**FRESH, "d.py": "4"}, TAG).native
    assert not native.decide(None, _manifest(), {"a.py": "1"}, TAG).native
    many = {f"m{i}.py": str(i) for i in range(5)}
    assert native.decide(None, _manifest(), many, TAG).reason.endswith("and 4 more")


@pytest.mark.parametrize(
    ("requested", "manifest", "tag", "reason"),
    [
        ("0", _manifest(), TAG, "TEESIM_NATIVE=0"),
        (None, None, TAG, "not built (make native)"),
        (None, "unreadable: [Errno 13] Permission denied", TAG, "native.json is unreadable: [Errno 13]"),
        (None, ["a list"], TAG, "not a manifest"),
        (None, _manifest(sources=["a.py"]), TAG, "not a manifest"),
        (None, _manifest(), "cpython-312", "this interpreter is 'cpython-312'"),
    ],
)
def test_the_source_build_runs_and_says_why(requested, manifest, tag, reason) -> None:
    decision = native.decide(requested, manifest, dict(FRESH), tag)
    assert not decision.native and reason in decision.reason


def test_every_compiled_module_has_a_source_in_the_package() -> None:
    assert all(native.module_source(m).is_file() for m in native.MODULES)
    assert len(set(native.MODULES)) == len(native.MODULES)


def test_an_edit_while_mypyc_runs_leaves_the_manifest_stale(monkeypatch, tmp_path: Path) -> None:
    """scripts/build_native.py records the sources it compiled, read before compiling: an edit made during
    the build (minutes) must not be vouched for (issue 27: it was, digests were read after compiling)."""
    import importlib.util

    # The script sets TEESIM_NATIVE=0 for its own process: undone after this test, or the rest of this worker
    # (and every teesim it starts) would run the source build.
    monkeypatch.setenv(native.ENVIRONMENT, "0")
    monkeypatch.setattr(sys, "path", list(sys.path))
    spec = importlib.util.spec_from_file_location("build_native", SIMULATOR.parent / "scripts" / "build_native.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    reads = iter([{"a.py": "compiled"}, {"a.py": "edited while compiling"}])
    monkeypatch.setattr(build._native, "source_digests", lambda: next(reads))
    monkeypatch.setattr(build._native, "MANIFEST", tmp_path / "native.json")
    monkeypatch.setattr(build, "clean", lambda: None)
    monkeypatch.setattr(build, "compile_modules", lambda: build._native.source_digests())  # the edit, mid-build
    monkeypatch.setattr(build, "check", lambda: "checked")
    monkeypatch.setattr(sys, "argv", ["build_native.py"])
    assert build.main() == 0
    manifest = json.loads((tmp_path / "native.json").read_text())
    assert manifest["sources"] == {"a.py": "compiled"}
    assert not native.decide(None, manifest, {"a.py": "edited while compiling"}, TAG).native


# -- the build on this checkout ------------------------------------------------------------------------


def _run(code: str, pythonpath: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code],
        # Only the build these tests ask for: make pytest's TEESIM_NATIVE=1 is not theirs.
        env={**{k: v for k, v in os.environ.items() if k != native.ENVIRONMENT}, "PYTHONPATH": str(pythonpath), **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture(scope="module")
def built() -> None:
    """The native build of this checkout: `make native` builds it (make pytest does); a test that needs
    it fails without it, unless TEESIM_NATIVE=0 says to run the source build only."""
    if os.environ.get(native.ENVIRONMENT) == "0":
        pytest.skip("TEESIM_NATIVE=0: the source build only")
    decision = native.decide(None, native._read_manifest(), native.source_digests(), TAG)
    assert decision.native, f"no usable native build ({decision.reason}): run make native"


STATUS = "import json, teesim._native as n, teesim.sim.simulation as s; print(json.dumps([n.status(), s.__file__]))"


def test_a_stale_build_is_never_imported(built, tmp_path: Path) -> None:
    # The simulator and the collection's module_utils it parses host files with (teesim._collection).
    copy = tmp_path / "simulator"
    shutil.copytree(SIMULATOR, copy, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    shutil.copytree(SIMULATOR.parent / "plugins", tmp_path / "plugins", ignore=shutil.ignore_patterns("__pycache__"))
    fresh = json.loads(_run(STATUS, copy).stdout)
    assert fresh[0]["build"] == "native" and not fresh[1].endswith(".py")

    edited = copy / "teesim" / "kernel" / "misc.py"
    edited.write_text(edited.read_text() + "\n# an edit after make native\n")
    stale = json.loads(_run(STATUS, copy).stdout)
    assert stale == [
        {"build": "source", "reason": "the source changed since make native: kernel/misc.py"},
        str(copy / "teesim" / "sim" / "simulation.py"),
    ]
    refused = _run(STATUS, copy, TEESIM_NATIVE="1")
    assert refused.returncode == 1
    assert "ImportError: TEESIM_NATIVE=1 but the native build cannot run: the source changed" in refused.stderr


def test_teesim_native_0_imports_the_source_beside_a_fresh_build(built) -> None:
    done = _run(STATUS, SIMULATOR, TEESIM_NATIVE="0")
    assert json.loads(done.stdout) == [
        {"build": "source", "reason": "TEESIM_NATIVE=0"},
        str(SIMULATOR / "teesim" / "sim" / "simulation.py"),
    ]
    assert "expected 0 (source), 1 (native)" in _run(STATUS, SIMULATOR, TEESIM_NATIVE="yes").stderr


# Every bundled scenario under every strategy: the metrics, and a digest of the timelines and failures.
REPORTS = """
import hashlib, json, sys
import teesim._native as native
from teesim.report.runner import simulate
from teesim.sim.scenario import bundled_scenarios, load_scenario
from teesim.strategies import STRATEGIES
out = {"build": native.status()["build"]}
for name, path in sorted(bundled_scenarios().items()):
    world = load_scenario(str(path), int(sys.argv[1])).world
    for strategy in STRATEGIES:
        sim, recorder = simulate(world, strategy)
        blob = json.dumps([recorder.timeline_data(), recorder.failure_data(limit=10**6)], sort_keys=True)
        metrics = {k: v for k, v in recorder.summary(sim).items() if not k.startswith("_runtime")}
        out[f"{name}/{strategy}"] = [metrics, hashlib.sha256(blob.encode()).hexdigest()]
print(json.dumps(out, sort_keys=True))
"""


@pytest.mark.slow
def test_the_native_build_reports_what_the_source_does(built) -> None:
    runs = {}
    for flag in ("1", "0"):
        done = _run(f"import sys; sys.argv[1:] = ['2']\n{REPORTS}", SIMULATOR, TEESIM_NATIVE=flag)
        assert done.returncode == 0, done.stderr[-2000:]
        runs[flag] = json.loads(done.stdout)
    assert runs["1"].pop("build") == "native" and runs["0"].pop("build") == "source"
    assert len(runs["1"]) == len(bundled_scenarios()) * len(STRATEGIES)
    differ = sorted(key for key in runs["1"] if runs["1"][key] != runs["0"][key])
    assert not differ, f"the native build reports differently for {differ}"
