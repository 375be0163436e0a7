#!/usr/bin/env python3
"""Build the real node (issue 46): the kubelet, containerd, the CNI plugins and the images its pods run.

``make node`` runs this. Everything comes from Go modules, as ``make k8s`` builds the control plane:

* the kubelet from ``tools/node`` (``k8s.io/kubernetes`` at the release ``tools/k8s`` pins, every staging module at
  the same published tag; this script refuses the build if a version the two modules share differs);
* containerd, its runc shim and ``ctr`` from ``tools/node/containerd`` (``github.com/containerd/containerd/v2``;
  the version is the one containerd's RELEASES.md recommends for this Kubernetes minor, see its go.mod);
* the CNI plugins ``loopback``, ``ptp`` and ``host-local`` from ``tools/node/cni`` (containerd's CRI reports
  ``NetworkReady=false`` without a CNI network, and the kubelet then keeps the Node ``NotReady``);
* ``teesim-guest`` and ``pause`` from ``tools/node/guest``, packed here into two OCI image archives
  (``FROM scratch`` images, one uncompressed layer with the one static binary; no registry is reachable).

runc is Debian's (``scripts/sysdeps.sh``). Output: ``~/.cache/confidential-tee/node/<kubernetes>-containerd-
<containerd>-<inputs>/`` with ``bin/``, ``bin/cni/``, ``images/`` and ``build.json``; ``<inputs>`` hashes the
wrapper sources, this script (it writes the images), ``go version`` and the build flags. It shares Go's module
and build caches with ``make k8s``, so packages the control plane compiled are not compiled again. A build lands
all at once (a temporary directory renamed into place), like ``make k8s``'s.

Prints the cache directory on stdout; ``--print`` prints it without building (empty and exit 1 if not built).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import build_k8s  # the control plane's build: its flags, version stamps and toolchain check

REPO_ROOT = build_k8s.REPO_ROOT
NODE = REPO_ROOT / "tools" / "node"
CACHE_ROOT = build_k8s.CACHE_ROOT.parent / "node"
CONTAINERD = "github.com/containerd/containerd/v2"
CNI = "github.com/containernetworking/plugins"
# The images the node's pods run; build.json records them (the test and `teesim run --real-node` read it there).
IMAGES = {"pause": "localhost/teesim/pause:1", "guest": "localhost/teesim/guest:1"}


def versions() -> dict[str, str]:
    return {
        "kubernetes": build_k8s.required_version(NODE / "go.mod", "k8s.io/kubernetes"),
        "containerd": build_k8s.required_version(NODE / "containerd" / "go.mod", CONTAINERD),
        "cni_plugins": build_k8s.required_version(NODE / "cni" / "go.mod", CNI),
    }


def requirements(go_mod: Path) -> dict[str, str]:
    """Every ``module version`` a go.mod requires or replaces to (the right-hand side of a replace wins)."""
    text = go_mod.read_text()
    found = dict(re.findall(r"^\s*(?:require\s+)?([\w.\-/]+\.[\w.\-/]+) (v\S+)", text, re.MULTILINE))
    found.update(dict(re.findall(r"^\s*([\w.\-/]+) => [\w.\-/]+ (v\S+)", text, re.MULTILINE)))
    return found


def check_same_release() -> None:
    """The kubelet must be built from exactly what the control plane is built from."""
    control_plane = requirements(build_k8s.WRAPPER / "go.mod")
    node = requirements(NODE / "go.mod")
    differ = sorted(m for m in set(control_plane) & set(node) if control_plane[m] != node[m])
    if differ:
        listed = ", ".join(f"{m} ({node[m]} here, {control_plane[m]} in tools/k8s)" for m in differ)
        raise SystemExit(f"make node: tools/node/go.mod and tools/k8s/go.mod disagree on {listed}: align them")


def ldflags(found: dict[str, str]) -> dict[str, str]:
    """Version stamps as each upstream Makefile sets them (-s -w as make k8s builds)."""
    return {
        "kubelet": build_k8s.version_ldflags(found["kubernetes"]),
        "containerd": f"-s -w -X {CONTAINERD}/version.Version={found['containerd']}",
        "cni": f"-s -w -X {CNI}/pkg/utils/buildversion.BuildVersion={found['cni_plugins']}",
        "guest": "-s -w",
    }


# Each build: the flags' key, the module directory, the packages, and where the binaries go under bin/.
BUILDS = (
    ("kubelet", NODE, ["./kubelet"], ""),
    (
        "containerd",
        NODE / "containerd",
        [f"{CONTAINERD}/cmd/{c}" for c in ("containerd", "containerd-shim-runc-v2", "ctr")],
        "",
    ),
    ("cni", NODE / "cni", [f"{CNI}/plugins/{p}" for p in ("main/loopback", "main/ptp", "ipam/host-local")], "cni"),
    ("guest", NODE / "guest", [".", "./pause"], "images-src"),
)


def inputs_digest(toolchain: str) -> str:
    digest = hashlib.sha256(f"{toolchain}\0{build_k8s.BUILD_ENV}\0{ldflags(versions())}".encode())
    digest.update(Path(__file__).read_bytes())
    for path in sorted(NODE.rglob("*")):
        if path.is_file() and path.suffix in {".go", ".mod", ".sum"}:
            digest.update(str(path.relative_to(NODE)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def cache_dir(toolchain: str) -> Path:
    found = versions()
    return CACHE_ROOT / f"{found['kubernetes']}-containerd-{found['containerd']}-{inputs_digest(toolchain)}"


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _layer(binary: Path, name: str) -> bytes:
    """One uncompressed layer holding ``/<name>``, reproducible (fixed owner and time)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime = binary.stat().st_size, 0o755, 0
        with binary.open("rb") as handle:
            tar.addfile(info, handle)
    return out.getvalue()


def write_image(binary: Path, name: str, reference: str, archive: Path) -> str:
    """An OCI image archive (image-layout in a tar) of a FROM-scratch image whose entrypoint is ``/<name>``;
    ``ctr images import`` takes it under ``reference``. Returns the manifest digest."""
    layer = _layer(binary, name)
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Entrypoint": [f"/{name}"], "User": "0:0"},
            "rootfs": {"type": "layers", "diff_ids": [_sha(layer)]},
        },
        sort_keys=True,
    ).encode()
    layer_media = "application/vnd.oci.image.layer.v1.tar"
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": _sha(config),
                "size": len(config),
            },
            "layers": [{"mediaType": layer_media, "digest": _sha(layer), "size": len(layer)}],
        },
        sort_keys=True,
    ).encode()
    index = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [
                {
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "digest": _sha(manifest),
                    "size": len(manifest),
                    "platform": {"architecture": "amd64", "os": "linux"},
                    "annotations": {"io.containerd.image.name": reference, "org.opencontainers.image.ref.name": "1"},
                }
            ],
        },
        sort_keys=True,
    ).encode()
    entries = {"oci-layout": b'{"imageLayoutVersion":"1.0.0"}', "index.json": index}
    for blob in (layer, config, manifest):
        entries[f"blobs/sha256/{_sha(blob).split(':')[1]}"] = blob
    with tarfile.open(archive, "w", format=tarfile.PAX_FORMAT) as tar:
        for path, data in entries.items():
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    return _sha(manifest)


def build(target: Path, toolchain: str) -> float:
    """Build everything into ``target`` (a fresh directory that does not exist yet); returns seconds taken."""
    found = versions()
    flags = ldflags(found)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    env = {**os.environ, **build_k8s.BUILD_ENV}
    started = time.monotonic()
    try:
        for key, module_dir, packages, into in BUILDS:
            print(f"building {key} ({module_dir.relative_to(REPO_ROOT)})", file=sys.stderr, flush=True)
            out = staging / "bin" / into if into != "images-src" else staging / into
            out.mkdir(parents=True, exist_ok=True)
            command = ["go", "build", "-trimpath", "-ldflags", flags[key], "-o", f"{out}/", *packages]
            subprocess.run(command, cwd=module_dir, env=env, check=True)
        images = staging / "images"
        images.mkdir()
        digests = {
            name: write_image(staging / "images-src" / binary, name, IMAGES[name], images / f"{name}.tar")
            for name, binary in (("pause", "pause"), ("guest", "guest"))
        }
        shutil.rmtree(staging / "images-src")
        seconds = time.monotonic() - started
        record = {
            **found,
            "go": toolchain,
            "images": IMAGES,
            "image_digests": digests,
            "build_seconds": round(seconds, 1),
        }
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
    check_same_release()
    toolchain = build_k8s.go_version()
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
            f"make node: `{' '.join(failed.cmd[:2])}` failed (exit {failed.returncode}); see go's error above",
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
