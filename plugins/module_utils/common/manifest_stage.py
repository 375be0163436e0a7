# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""All or nothing across roles for a GitOps directory: stage, render every role into the stage, commit once.

The cluster playbook runs several roles, each writing its own manifests. Written straight into the user's
directory, a failure in a later role would leave earlier roles' files rewritten. Instead the playbook copies
the directory's manifests into a private staging directory next to it, every role writes there (and prunes
there), and only when every role succeeded is the difference written into the real directory through the one
change recorder (which restores every file on any failure). A failed run removes the stage and leaves the real
directory byte-identical.

What is staged: the ``*.yaml`` files directly in the directory (the ones ``tee_manifests`` reads and writes) and
the ``nodes/`` tree (per-node drop-ins the GPU role renders). Nothing else in the directory is read or touched.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile

from ansible_collections.confidential.tee.plugins.module_utils.common.errors import TeeError
from ansible_collections.confidential.tee.plugins.module_utils.common.file_names import NAME_MAX, bounded_name
from ansible_collections.confidential.tee.plugins.module_utils.common.manifests import owner_of

STAGE_TAG = ".tee-staging-"
NODES = "nodes"
# A manifest or drop-in is a few KiB; anything this large is not a file the collection stages.
MAX_STAGED = 4 * 1024 * 1024


class StageError(TeeError):
    """A staging directory that cannot be made, read or committed."""


def _regular(path: str) -> os.stat_result | None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    return st if stat.S_ISREG(st.st_mode) else None


def staged_names(root: str) -> list[str]:
    """Relative paths under ``root`` that take part: top-level ``*.yaml`` and regular files under ``nodes/``."""
    if not os.path.isdir(root):
        return []
    names = [n for n in os.listdir(root) if n.endswith(".yaml") and _regular(os.path.join(root, n))]
    top = os.path.join(root, NODES)
    if os.path.isdir(top) and not os.path.islink(top):
        for here, dirs, files in os.walk(top):
            dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(here, d))]
            for name in files:
                full = os.path.join(here, name)
                if _regular(full):
                    names.append(os.path.relpath(full, root))
    return sorted(names)


def _read(path: str) -> bytes:
    with open(path, "rb") as handle:
        data = handle.read(MAX_STAGED + 1)
    if len(data) > MAX_STAGED:
        raise StageError("%s is larger than %d bytes: not a manifest this collection writes" % (path, MAX_STAGED))
    return data


# mkdtemp appends 8 random characters to the prefix.
MKDTEMP_RANDOM = 8


def stage_prefix(dest: str) -> str:
    """``.<dest's name>.tee-staging-``, with a long name shortened so that the stage's name fits NAME_MAX."""
    base = os.path.basename(dest.rstrip("/"))
    return bounded_name("." + base, STAGE_TAG, limit=NAME_MAX - MKDTEMP_RANDOM)


def is_stage(dest: str, staging: str) -> bool:
    """Whether ``staging`` is a stage made for ``dest`` (the only directories commit and abort remove)."""
    base = os.path.basename(staging.rstrip("/"))
    return base.startswith(stage_prefix(dest)) and os.path.isdir(staging)


def stage(dest: str) -> str:
    """Make a private stage next to ``dest`` holding copies of its staged files; return its path.

    Next to ``dest`` when its parent exists (same file system, and visible to whoever looks there), else in the
    system temporary directory: the commit copies contents, so where the stage lives changes nothing else.
    """
    if not os.path.isabs(dest):
        raise StageError("the manifest directory %r must be an absolute path here (the playbook resolves it)" % dest)
    if os.path.lexists(dest) and not os.path.isdir(dest):
        raise StageError("%s exists and is not a directory: set tee_manifest_dir to a directory" % dest)
    parent = os.path.dirname(dest.rstrip("/")) or "/"
    prefix = stage_prefix(dest)
    try:
        where = tempfile.mkdtemp(prefix=prefix, dir=parent if os.path.isdir(parent) else None)
    except OSError as exc:
        raise StageError("cannot make a staging directory next to %s: %s" % (dest, exc.strerror or exc)) from exc
    try:
        for name in staged_names(dest):
            source, target = os.path.join(dest, name), os.path.join(where, name)
            os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)
            mode = os.lstat(source).st_mode & 0o777
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as handle:
                handle.write(_read(source))
            os.chmod(target, mode)
    except (OSError, StageError) as exc:
        shutil.rmtree(where, ignore_errors=True)
        raise StageError("cannot copy %s into its staging directory: %s" % (dest, exc)) from exc
    return where


def plan_commit(staged: dict, existing: dict) -> tuple[list, list]:
    """``(writes, removals)`` that make the real directory what the stage holds.

    ``staged`` maps relative paths to ``(bytes, mode)``, ``existing`` to bytes. A staged file that differs is
    written; a top-level manifest this collection wrote that the roles pruned from the stage is removed. A user's
    file is never removed (the stage started with it and no role removes a file without its owner line).
    """
    writes = [
        {"file": name, "content": data, "mode": mode}
        for name, (data, mode) in sorted(staged.items())
        if existing.get(name) != data
    ]
    removals = []
    for name, data in sorted(existing.items()):
        if name in staged or os.sep in name:
            continue
        if owner_of(data.decode("utf-8", "replace")) is not None:
            removals.append(name)
    return writes, removals


def read_tree(root: str, with_mode: bool) -> dict:
    out = {}
    for name in staged_names(root):
        full = os.path.join(root, name)
        data = _read(full)
        out[name] = (data, os.lstat(full).st_mode & 0o777) if with_mode else data
    return out


def remove_stage(dest: str, staging: str) -> bool:
    """Remove a stage of ``dest``; anything that is not one is left alone."""
    if not is_stage(dest, staging):
        return False
    shutil.rmtree(staging, ignore_errors=True)
    return True
