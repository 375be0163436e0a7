#!/usr/bin/env python3
"""Build the live tests' control plane (etcd, kube-apiserver, kube-scheduler, kubectl) from Go modules.

``make k8s`` runs this. The wrapper modules live in ``tools/k8s`` (see its ``go.mod`` for why a wrapper is
needed at all). Binaries go to ``~/.cache/confidential-tee/k8s/<kubernetes>-etcd-<etcd>-<inputs>/bin`` where
``<inputs>`` hashes the wrapper sources and the ``go version``: a cached build is reused only when it was made
from the same sources with the same toolchain, and a build lands all at once (built in a temporary directory,
then renamed), so an interrupted build never leaves a half-filled cache. ``build.json`` beside ``bin/`` records
what was built and with which Go.

Prints the cache directory on stdout; ``--print`` prints it without building (empty and exit 1 if not built).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
WRAPPER = REPO_ROOT / "tools" / "k8s"
CACHE_ROOT = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "confidential-tee" / "k8s"
# Each binary: the wrapper module directory it is built in, and its package there.
BINARIES = {
    "kube-apiserver": (WRAPPER, "./kube-apiserver"),
    "kube-scheduler": (WRAPPER, "./kube-scheduler"),
    "kubectl": (WRAPPER, "./kubectl"),
    "etcd": (WRAPPER / "etcd", "."),
}


# Static binaries as upstream builds them; -p=2: these machines have two cores, shared.
BUILD_ENV = {"CGO_ENABLED": "0", "GOFLAGS": "-mod=readonly -buildvcs=false -p=2"}


def required_version(go_mod: Path, module: str) -> str:
    """The version ``go_mod`` requires of ``module`` (a direct requirement)."""
    match = re.search(rf"^\s*(?:require\s+)?{re.escape(module)} (v\S+)", go_mod.read_text(), re.MULTILINE)
    if match is None:
        raise SystemExit(f"{go_mod}: no requirement on {module}")
    return match.group(1)


def go_version() -> str:
    if shutil.which("go") is None:
        raise SystemExit(
            "make k8s: no `go` on PATH; the control plane is built from Go modules: install Go 1.26 or later"
        )
    return subprocess.run(["go", "version"], check=True, capture_output=True, text=True).stdout.strip()


def inputs_digest(toolchain: str) -> str:
    """A digest of everything a build depends on: the wrapper sources, the Go toolchain and the build flags."""
    digest = hashlib.sha256(f"{toolchain}\0{BUILD_ENV}\0{version_ldflags(versions()['kubernetes'])}".encode())
    for path in sorted(WRAPPER.rglob("*")):
        if path.is_file() and path.suffix in {".go", ".mod", ".sum"}:
            digest.update(str(path.relative_to(WRAPPER)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def versions() -> dict[str, str]:
    return {
        "kubernetes": required_version(WRAPPER / "go.mod", "k8s.io/kubernetes"),
        "etcd": required_version(WRAPPER / "etcd" / "go.mod", "go.etcd.io/etcd/server/v3"),
    }


def cache_dir(toolchain: str) -> Path:
    found = versions()
    return CACHE_ROOT / f"{found['kubernetes']}-etcd-{found['etcd']}-{inputs_digest(toolchain)}"


def version_ldflags(kubernetes: str) -> str:
    """What upstream's hack/lib/version.sh stamps, so that ``kubectl version`` and /version name the release."""
    major, minor = kubernetes.lstrip("v").split(".")[:2]
    stamps = {"gitVersion": kubernetes, "gitMajor": major, "gitMinor": minor, "gitTreeState": "clean"}
    flags = ["-s", "-w"]
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [f"-X {package}.{name}={value}" for name, value in stamps.items()]
    return " ".join(flags)


def build(target: Path, toolchain: str) -> float:
    """Build every binary into ``target`` (a fresh directory that does not exist yet); returns seconds taken."""
    found = versions()
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    env = {**os.environ, **BUILD_ENV}
    started = time.monotonic()
    try:
        for name, (module_dir, package) in BINARIES.items():
            print(f"building {name} ({module_dir.relative_to(REPO_ROOT)})", file=sys.stderr, flush=True)
            command = ["go", "build", "-trimpath", "-ldflags", version_ldflags(found["kubernetes"])]
            subprocess.run([*command, "-o", str(staging / "bin" / name), package], cwd=module_dir, env=env, check=True)
        seconds = time.monotonic() - started
        record = {**found, "go": toolchain, "binaries": sorted(BINARIES), "build_seconds": round(seconds, 1)}
        (staging / "build.json").write_text(json.dumps(record, indent=2) + "\n")
        staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--print", action="store_true", help="print the cache directory without building")
    args = parser.parse_args(argv)
    toolchain = go_version()
    target = cache_dir(toolchain)
    if (target / "build.json").is_file():
        print(target)
        return 0
    if args.print:
        return 1
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        seconds = build(target, toolchain)
    except subprocess.CalledProcessError as failed:
        print(
            f"make k8s: `{' '.join(failed.cmd[:2])}` failed (exit {failed.returncode}); see go's error above",
            file=sys.stderr,
        )
        return 1
    except OSError:
        if not (target / "build.json").is_file():  # lost a race with another build only if that one landed
            raise
    else:
        print(f"built in {seconds:.0f} s", file=sys.stderr)
    print(target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
