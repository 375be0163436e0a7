"""Compile teesim's hot modules with mypyc, in place, and write the manifest that lets them run.

``make native`` runs this (``make collection`` does, unless ``TEESIM_NATIVE=0``); what it builds and when
it is used is in ``simulator/teesim/_native.py``. Steps:

1. remove the compiled files of an earlier build and its manifest (so that a failed build leaves the
   source build, never half of one);
2. compile ``teesim._native.MODULES`` as one mypyc group (mypy type-checks them first: a type error
   stops the build) with setuptools' ``build_ext --inplace``, the C and objects in ``.build/native``;
3. write ``simulator/teesim/native.json``: the interpreter's cache tag, mypy's version, a SHA-256 of
   every source file as it was read before compiling (an edit during the build leaves it stale);
4. check the effective result: a fresh interpreter with ``TEESIM_NATIVE=1`` imports every module from its
   compiled file.

Needs a C compiler and the interpreter's headers (Debian: ``gcc``; pyenv and python.org builds carry
the headers). Usage: python scripts/build_native.py [--clean]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SIMULATOR = ROOT / "simulator"
BUILD = ROOT / ".build" / "native"

os.environ["TEESIM_NATIVE"] = "0"  # this process imports the source, whatever is built
sys.path.insert(0, str(SIMULATOR))

from teesim import _native  # noqa: E402  (after the environment and path above)

# Run in a child with the simulator directory as its working directory: mypyc names modules by their
# path from there, and build_ext --inplace writes the runtime module there too.
_COMPILE = """
import sys
from setuptools import setup
from mypyc.build import mypycify

modules, target, build = sys.argv[1].split(","), sys.argv[2], sys.argv[3]
options = ["--ignore-missing-imports", "--follow-imports=silent", "--cache-dir", build + "/mypy-cache"]
setup(
    name="teesim-native",
    ext_modules=mypycify([*options, *modules],
                         target_dir=target, group_name="teesim_native", opt_level="3"),
    script_args=["--quiet", "build", "--build-base", build, "build_ext", "--inplace", "--parallel", "2"],
)
"""

_CHECK = """
import importlib, importlib.machinery, sys
import teesim._native as native
for name in native.MODULES:
    module = importlib.import_module(name)
    if not module.__file__.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)):
        sys.exit(f"{name} was imported from {module.__file__}, not from its compiled file")
print(native.status()["reason"])
"""


def clean() -> None:
    """Remove every compiled module, the runtime and the manifest of an earlier build."""
    _native.MANIFEST.unlink(missing_ok=True)
    for module in _native.MODULES:
        for path in _native.compiled_files(module):
            path.unlink()
    for path in SIMULATOR.glob(f"{_native.RUNTIME}.*"):
        path.unlink()


def _toolchain_problem() -> str | None:
    """Why a C extension cannot be built here, before mypy spends a minute type-checking."""
    headers = Path(sysconfig.get_paths()["include"]) / "Python.h"
    if not headers.is_file():
        return f"no {headers}: install the interpreter's headers (Debian: python3-dev)"
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        return f"no C compiler {compiler!r} on PATH: install gcc (make sysdeps does)"
    return None


def compile_modules() -> None:
    problem = _toolchain_problem()
    if problem:
        sys.exit(f"cannot build teesim's native modules: {problem}; or set TEESIM_NATIVE=0 for the source build")
    sources = [str(_native.module_source(m).relative_to(SIMULATOR)) for m in _native.MODULES]
    BUILD.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(
        [sys.executable, "-c", _COMPILE, ",".join(sources), str(BUILD / "c"), str(BUILD / "setuptools")],
        cwd=SIMULATOR,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        clean()
        output = (result.stdout + result.stderr).strip().splitlines()
        sys.exit(
            "mypyc could not build the native modules; the source build stays in use.\n"
            + "\n".join(output[-25:])
            + "\nFix the error above (a type error in a listed module stops the build), or install gcc and "
            "the Python headers, or set TEESIM_NATIVE=0 to use the source build only."
        )


def write_manifest(sources: dict[str, str]) -> None:
    """``sources``: the digests read before compiling, so that an edit made while mypyc ran leaves the
    manifest stale (the source runs) instead of vouching for code that was not compiled."""
    from mypy.version import __version__ as mypy_version

    manifest = {
        "cache_tag": sys.implementation.cache_tag,
        "mypy": mypy_version,
        "modules": list(_native.MODULES),
        "sources": sources,
    }
    _native.MANIFEST.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def check() -> str:
    env = {**os.environ, "TEESIM_NATIVE": "1", "PYTHONPATH": str(SIMULATOR)}
    result = subprocess.run(
        [sys.executable, "-c", _CHECK], env=env, capture_output=True, text=True, check=False, cwd=ROOT
    )
    if result.returncode != 0:
        clean()
        sys.exit(f"the native build does not load; removed it:\n{(result.stdout + result.stderr).strip()}")
    return result.stdout.strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clean", action="store_true", help="only remove an earlier build")
    args = parser.parse_args()
    clean()
    if args.clean:
        return 0
    sources = _native.source_digests()
    compile_modules()
    write_manifest(sources)
    print(f"teesim native build: {len(_native.MODULES)} modules, {check()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
