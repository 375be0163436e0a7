#!/usr/bin/env python3
"""make image: the key agent's image, localhost/confidential-tee/key-agent:<collection version>, built with podman.

Stages the build context (the Containerfile and the agent's files, as plugins/plugin_utils/agent_files.py lists
them for the host role too), makes the Debian base with python3 (scripts/molecule-image.sh, cached) and builds.
Cached: when the image of that tag carries the digest of the staged context (label confidential-tee.agent-digest),
nothing is built. Prints the image reference on its last line.

Environment: AGENT_IMAGE (the reference to build), FORCE_REBUILD=1, CONTAINERS_CONF (else scripts/podman-conf.sh's).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "plugins" / "plugin_utils"))
import agent_files  # noqa: E402  (the collection's own list; plugin_utils is not importable as a package here)

BASE = "localhost/confidential-tee/debian-python:12"
REPOSITORY = "localhost/confidential-tee/key-agent"
LABEL = "confidential-tee.agent-digest"


def version() -> str:
    """The collection's version as the agent itself says it (its --version): the image's tag."""
    sys.path.insert(0, str(REPO / ".build" / "collections"))
    from ansible_collections.confidential.tee.plugins.module_utils.agent.cli import collection_version

    return collection_version(str(REPO))


def stage(context: Path) -> str:
    """Copy the Containerfile and the agent's files into ``context``; the digest of everything copied."""
    digest = hashlib.sha256()
    shutil.copy2(REPO / "Containerfile", context / "Containerfile")
    digest.update((REPO / "Containerfile").read_bytes())
    target = context / "agent" / "ansible_collections" / "confidential" / "tee"
    for path in agent_files.agent_files(REPO):
        (target / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / path, target / path)
        digest.update(path.encode() + b"\0" + (REPO / path).read_bytes())
    return digest.hexdigest()[:16]


def podman(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["podman", *args], capture_output=True, text=True, check=check)


def main() -> int:
    if not os.environ.get("CONTAINERS_CONF"):
        conf = subprocess.run([str(REPO / "scripts" / "podman-conf.sh")], capture_output=True, text=True, check=True)
        os.environ["CONTAINERS_CONF"] = conf.stdout.strip()
    image = os.environ.get("AGENT_IMAGE") or f"{REPOSITORY}:{version()}"
    with tempfile.TemporaryDirectory(prefix="agent-image.") as tmp:
        context = Path(tmp)
        digest = stage(context)
        label = "{{index .Labels " + json.dumps(LABEL) + "}}"
        found = podman("image", "inspect", "--format", label, image, check=False)
        if os.environ.get("FORCE_REBUILD") != "1" and found.returncode == 0 and found.stdout.strip() == digest:
            print(f"agent_image: {image} is up to date (context {digest})", file=sys.stderr)
            print(image)
            return 0
        env = {**os.environ, "MOLECULE_IMAGE": BASE, "IMAGE_PACKAGES": "python3", "IMAGE_CMD": '["python3"]'}
        subprocess.run([str(REPO / "scripts" / "molecule-image.sh")], env=env, check=True)
        built = subprocess.run(
            [
                "podman",
                "build",
                "--build-arg",
                f"BASE={BASE}",
                "--label",
                f"{LABEL}={digest}",
                "--tag",
                image,
                str(context),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if built.returncode != 0:
            print(built.stdout[-3000:] + built.stderr[-3000:], file=sys.stderr)
            return built.returncode
    print(f"agent_image: built {image} (context {digest})", file=sys.stderr)
    print(image)
    return 0


if __name__ == "__main__":
    sys.exit(main())
