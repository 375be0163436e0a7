"""The native build: the simulator's hot modules compiled with mypyc, used only while it matches the source.

The model is pure Python, and a sweep is millions of events. ``make native`` (part of ``make collection``,
``scripts/build_native.py``) compiles :data:`MODULES` with mypyc, as black and mypy ship themselves: beside
each ``x.py`` an ``x.<cache tag>-<platform>.so``, the shared runtime ``simulator/teesim_native__mypyc.*.so``,
and the manifest ``teesim/native.json`` (the interpreter's cache tag and a SHA-256 of every source file
of the package). The compiled modules run the same code: ``tests/simulator/test_native.py`` compares
their reports with the source's, run for run.

Python imports an extension module before a source file of the same name, so a compiled module left from
before an edit would run instead of the edit. :func:`select` (run by ``teesim/__init__``) therefore
compares the manifest with the sources at every import, and loads :data:`MODULES` from their ``.py`` files
(a finder put in front of the others) when:

* a source file differs from the one compiled, or the manifest is missing or from another interpreter;
* ``TEESIM_NATIVE=0`` is set.

All or none: compiled modules call each other directly, so half a build would mix two versions.
``TEESIM_NATIVE=1`` turns a missing or stale build into an ``ImportError`` that says why (the tests and
benchmarks that compare the two builds). :func:`status` says which build runs and why.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
MANIFEST = PACKAGE_DIR / "native.json"
ENVIRONMENT = "TEESIM_NATIVE"
# The shared runtime mypyc builds for the group (a top-level module beside the package).
RUNTIME = "teesim_native__mypyc"

# What a sweep spends its time in (cProfile of every bundled scenario and strategy): the event loop, the
# cluster model, the kernel's misc controller, the kubelet's device manager, the advertiser models, the
# simulation and the report's recorder. The rest (CLI, loaders, gRPC, rendering) runs once per run.
MODULES: tuple[str, ...] = (
    "teesim.engine.clock",
    "teesim.cluster.dra",
    "teesim.cluster.node",
    "teesim.cluster.pods",
    "teesim.cluster.queue",
    "teesim.cluster.scheduler",
    "teesim.kernel.kvm",
    "teesim.kernel.misc",
    "teesim.kubelet.admission",
    "teesim.kubelet.devicemanager",
    "teesim.kubelet.ratelimit",
    "teesim.plugins.models",
    "teesim.plugins.reconcile",
    "teesim.strategies.observe",
    "teesim.sim.node_kubelet",
    "teesim.sim.simulation",
    "teesim.report.metrics",
    # teesim serve's subclasses of the classes above: compiled with them, since compiled code does not see
    # an interpreted subclass's overrides (tests/simulator/test_native_subclasses.py).
    "teesim.serve.clock",
    "teesim.serve.engine",
)


@dataclass(frozen=True)
class Decision:
    native: bool
    reason: str


def module_source(module: str) -> Path:
    """The ``.py`` file of one of :data:`MODULES`."""
    return PACKAGE_DIR.joinpath(*module.split(".")[1:]).with_suffix(".py")


def source_digests(package_dir: Path = PACKAGE_DIR) -> dict[str, str]:
    """SHA-256 of every ``.py`` file of the package, by path relative to it (about 2 ms)."""
    return {
        path.relative_to(package_dir).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(package_dir.rglob("*.py"))
    }


def compiled_files(module: str) -> list[Path]:
    """The extension files Python would import for ``module`` instead of its source."""
    source = module_source(module)
    return [
        candidate
        for suffix in importlib.machinery.EXTENSION_SUFFIXES
        if (candidate := source.with_name(source.stem + suffix)).is_file()
    ]


def decide(requested: str | None, manifest: object, digests: dict[str, str], cache_tag: str) -> Decision:
    """Whether the native build may run: ``requested`` is ``TEESIM_NATIVE``, ``manifest`` the parsed
    ``native.json`` (None when there is none), ``digests`` the sources now."""
    if requested == "0":
        return Decision(False, f"{ENVIRONMENT}=0")
    if manifest is None:
        return Decision(False, "not built (make native)")
    if isinstance(manifest, str):  # what _read_manifest says of a file it could not read or parse
        return Decision(False, f"{MANIFEST.name} is {manifest}")
    if not isinstance(manifest, dict) or not isinstance(manifest.get("sources"), dict):
        return Decision(False, f"{MANIFEST.name} is not a manifest written by scripts/build_native.py")
    if manifest.get("cache_tag") != cache_tag:
        return Decision(False, f"built for {manifest.get('cache_tag')!r}, this interpreter is {cache_tag!r}")
    built = manifest["sources"]
    changed = sorted(name for name in built.keys() | digests.keys() if built.get(name) != digests.get(name))
    if changed:
        shown = ", ".join(changed[:3]) + (f" and {len(changed) - 3} more" if len(changed) > 3 else "")
        return Decision(False, f"the source changed since make native: {shown}")
    return Decision(True, f"compiled by mypyc {manifest.get('mypy', '?')}")


def _read_manifest() -> object:
    try:
        return json.loads(MANIFEST.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        return f"unreadable: {exc}"


class _SourceFinder:
    """Loads :data:`MODULES` from their ``.py`` files even where a compiled file sits beside them."""

    def find_spec(self, fullname: str, path: object = None, target: object = None):
        if fullname not in MODULES:
            return None
        return importlib.util.spec_from_file_location(fullname, module_source(fullname))


_decision: Decision | None = None


def select() -> Decision:
    """Choose the build for this process (once); see the module docstring."""
    global _decision
    if _decision is not None:
        return _decision
    requested = os.environ.get(ENVIRONMENT)
    if requested not in (None, "", "0", "1"):
        raise ImportError(f"{ENVIRONMENT}={requested!r}: expected 0 (source), 1 (native) or unset (native if fresh)")
    manifest = None if requested == "0" else _read_manifest()
    digests = source_digests() if isinstance(manifest, dict) else {}
    decision = decide(requested, manifest, digests, sys.implementation.cache_tag)
    if not decision.native:
        if requested == "1":
            raise ImportError(f"{ENVIRONMENT}=1 but the native build cannot run: {decision.reason}")
        if any(compiled_files(module) for module in MODULES):
            sys.meta_path.insert(0, _SourceFinder())
    _decision = decision
    return decision


def status() -> dict[str, object]:
    """Which build runs in this process and why (for reports and benchmarks)."""
    decision = select()
    return {"build": "native" if decision.native else "source", "reason": decision.reason}
