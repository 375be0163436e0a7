"""``teesim serve --root DIR``: serve removes only what it recorded creating there.

A run creates the top-level directories of the node tree (``sys``, ``proc``, ``dev``, ``etc``, ``var``)
in an empty or new ``DIR`` and records them in ``DIR/teesim-serve.created.json`` (:data:`MANIFEST`):
the root's and each directory's device and inode number, read right after ``mkdir``. A later run on the
same root removes those directories (a previous run's guests' cgroups and sockets must not be read as
this run's) only when it can prove each is the one it created:

* the manifest is a regular file (not a link), parses, is exactly the structure written here, and was
  written for this directory (its device and inode number, so a manifest copied from elsewhere proves
  nothing);
* every name it lists is one serve creates (a single path component among :data:`SERVE_TOPS`);
* every listed path that exists is a real directory (a symbolic link is refused, wherever it points)
  with the device and inode number recorded;
* nothing else is at the top of the root but the manifest and serve's state file.

Anything else (an unreadable or garbled manifest, a path it did not create, a link, a file of someone
else's beside them) is refused with what and where, before anything is removed: exit 2, nothing
deleted. ``shutil.rmtree`` removes links inside the trees without following them.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

MANIFEST = "teesim-serve.created.json"
WRITTEN_BY = "teesim serve"
# The top-level directories serve writes: the node tree (teesim.kernel.node) and var/lib/kubelet.
SERVE_TOPS = frozenset({"dev", "etc", "proc", "sys", "var"})


def _identity(path: Path) -> list[int]:
    st = path.lstat()
    return [st.st_dev, st.st_ino]


def _refuse(root: Path, why: str) -> ValueError:
    return ValueError(
        f"--root {root}: {why}; serve removes only what its own manifest proves it created, so it leaves this "
        "directory as it is: give an empty or new directory, or remove this one yourself"
    )


def _read_manifest(root: Path) -> dict[str, list[int]]:
    """The directories the manifest says serve created, once everything in the module docstring holds."""
    path = root / MANIFEST
    if not os.path.lexists(path):
        raise _refuse(root, f"the directory is not empty and no teesim serve run left it (no {path})")
    if path.is_symlink() or not path.is_file():
        raise _refuse(root, f"{path} is not a regular file")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise _refuse(root, f"{path} is unreadable: {exc}") from None
    if (
        not isinstance(data, dict)
        or set(data) != {"written_by", "root", "created"}
        or data["written_by"] != WRITTEN_BY
        or not isinstance(data["created"], dict)
    ):
        raise _refuse(root, f"{path} is not a manifest teesim serve wrote")
    if data["root"] != _identity(root):
        raise _refuse(root, f"{path} was written for another directory (device and inode differ)")
    created: dict[str, list[int]] = {}
    for name, identity in data["created"].items():
        if name not in SERVE_TOPS:
            raise _refuse(root, f"{path} lists {name!r}, which teesim serve never creates")
        if not (isinstance(identity, list) and len(identity) == 2 and all(type(i) is int for i in identity)):
            raise _refuse(root, f"{path}: {name!r} has no device and inode number")
        created[name] = identity
    return created


def _check_created(root: Path, created: dict[str, list[int]]) -> None:
    ours = {MANIFEST, "teesim-serve.json", ".teesim-serve.json.tmp", f".{MANIFEST}.tmp"}
    for entry in sorted(root.iterdir()):
        if entry.name not in ours and entry.name not in created:
            raise _refuse(root, f"{entry} was not created by teesim serve (not in {root / MANIFEST})")
    for name, identity in sorted(created.items()):
        path = root / name
        if not os.path.lexists(path):
            continue
        if path.is_symlink() or not path.is_dir():
            raise _refuse(root, f"{path} is not the directory teesim serve created (now a link or a file)")
        if _identity(path) != identity:
            raise _refuse(root, f"{path} is not the directory teesim serve created (device and inode differ)")


def prepare_root(root: Path, tops: list[str]) -> None:
    """Make ``root`` hold the empty top-level directories ``tops`` (a subset of :data:`SERVE_TOPS`) and a
    manifest that records them; a previous run's are removed first, anything else refused (ValueError)."""
    unknown = sorted(set(tops) - SERVE_TOPS)
    if unknown:
        raise ValueError(f"internal: serve would create {unknown}, not in teesim.serve.root.SERVE_TOPS")
    if not os.path.lexists(root):
        root.mkdir(parents=True)
    if not root.is_dir():
        raise ValueError(f"--root {root}: not a directory")
    root = root.resolve()
    if any(root.iterdir()):
        created = _read_manifest(root)
        _check_created(root, created)
        for name in sorted(created):
            if os.path.lexists(root / name):
                shutil.rmtree(root / name)
        (root / MANIFEST).unlink()
    identities = {}
    for name in sorted(tops):
        (root / name).mkdir()
        identities[name] = _identity(root / name)
    tmp = root / f".{MANIFEST}.tmp"
    manifest = {"written_by": WRITTEN_BY, "root": _identity(root), "created": identities}
    tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, root / MANIFEST)
