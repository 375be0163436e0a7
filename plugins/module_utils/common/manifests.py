# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""File names and order for GitOps output: one file per object, names that never change between runs.

``NN-<kind>-[<namespace>-]<name>.yaml``: the number orders objects the way they can be applied
(ConfigMaps before the operators that read them, RuntimeClasses before workloads, the KataConfig last),
so ``kubectl apply -f DIR`` (which walks files in name order) and GitOps tools give the same result.
"""

from __future__ import annotations

import re

from ansible_collections.confidential.tee.plugins.module_utils.common.errors import TeeError
from ansible_collections.confidential.tee.plugins.module_utils.common.file_names import bounded_name, fits

KIND_ORDER = {
    "Namespace": 0,
    # RBAC before the workloads that use it (the key agent's, issue 45).
    "ServiceAccount": 1,
    "ClusterRole": 2,
    "Role": 2,
    "ClusterRoleBinding": 3,
    "RoleBinding": 3,
    "Secret": 5,
    "ConfigMap": 10,
    "NodeFeatureRule": 20,
    "RuntimeClass": 30,
    "KubeVirt": 40,
    "HyperConverged": 40,
    "Node": 50,
    "KataConfig": 60,
    "Service": 70,
    "Deployment": 80,
    # The key agent's own-Node policy before the agent, the agent before the policy that makes VMIs request its pool:
    # a VMI charged before the agent advertises would wait; one admitted uncharged in between holds a key the agent
    # counts as used outside Kubernetes (the pool only shrinks).
    "ValidatingAdmissionPolicy": 82,
    "ValidatingAdmissionPolicyBinding": 83,
    "DaemonSet": 85,
    "MutatingAdmissionPolicy": 86,
    "MutatingAdmissionPolicyBinding": 87,
}
_UNSAFE = re.compile(r"[^a-z0-9.-]+")


class ManifestError(TeeError):
    """An object without the identity a manifest file needs."""


def file_name(obj: dict) -> str:
    if not isinstance(obj, dict):
        raise ManifestError("a manifest must be a Kubernetes object (mapping), got %r" % (obj,))
    kind = obj.get("kind")
    meta = obj.get("metadata") or {}
    name = meta.get("name")
    if not kind or not name or not obj.get("apiVersion"):
        raise ManifestError("object %r lacks apiVersion, kind or metadata.name" % (obj,))
    parts = [kind.lower()] + ([meta["namespace"]] if meta.get("namespace") else []) + [name]
    stem = "%02d-%s" % (KIND_ORDER.get(kind, 90), _UNSAFE.sub("-", "-".join(parts).lower()))
    # A 253-character node name makes a stem over NAME_MAX: a prefix and a digest of the object's identity.
    return bounded_name(stem, ".yaml", identity="\0".join(str(part) for part in parts))


def manifest_files(objects) -> list:
    """``[{"file", "object"}]`` sorted by file name; two objects with one file name are an error."""
    out = {}
    for obj in objects or []:
        name = file_name(obj)
        if name in out:
            raise ManifestError(
                "two objects would be written to %s: %s %s" % (name, obj.get("kind"), obj["metadata"]["name"])
            )
        out[name] = obj
    return [{"file": name, "object": out[name]} for name in sorted(out)]


MARKER_PREFIX = "# confidential.tee owner: "


def marker(owner: str) -> str:
    """First line of every manifest an owner writes; pruning touches only files that carry it."""
    return "%s%s\n" % (MARKER_PREFIX, owner)


def owner_of(text) -> str | None:
    """The owner named by a manifest's first line, ``None`` when the file is not one this collection wrote."""
    if not isinstance(text, str) or not text.startswith(MARKER_PREFIX):
        return None
    return text[len(MARKER_PREFIX) :].split("\n", 1)[0]


def _refuse_foreign(name: str, text, owner: str) -> None:
    """A file at a name this owner writes that someone else wrote is named and left alone, never overwritten."""
    found = owner_of(text)
    if found == owner:
        return
    if found is None:
        why = "is not a file this collection wrote (%s)" % (
            "unreadable as UTF-8 text" if text is None else "its first line is not %r" % MARKER_PREFIX.strip()
        )
    else:
        why = "was written by %s, not %s" % (found, owner)
    raise ManifestError(
        "%s %s: refusing to overwrite it. Move or rename that file (this collection writes the object there), "
        "or point tee_manifest_dir at a directory of its own" % (name, why)
    )


def plan_directory(existing: dict, wanted: list, owner: str, prune: bool = True):
    """``(writes, removals)`` to turn a directory into ``wanted``.

    ``existing`` maps file names to their text (``None`` when unreadable); ``wanted`` is
    ``[{"file", "content"}]``. A file is rewritten only when its text differs; with ``prune`` this
    owner's files that are no longer wanted are removed, files of other owners or of nobody never are.
    """
    head = marker(owner)
    writes, names = [], set()
    for item in wanted:
        name, content = item.get("file"), item.get("content")
        if not isinstance(name, str) or "/" in name or "\0" in name or name in ("", ".", ".."):
            raise ManifestError("manifest file name %r must be a plain file name" % (name,))
        if not fits(name):
            raise ManifestError(
                "manifest file name %s... has %d bytes; a file name has at most 255 (NAME_MAX): shorten it"
                % (name[:40], len(name.encode("utf-8", "surrogatepass")))
            )
        if not isinstance(content, str) or not content.startswith(head):
            raise ManifestError("manifest %s must start with the owner line %r" % (name, head.strip()))
        names.add(name)
        if name in existing:
            _refuse_foreign(name, existing[name], owner)
        if existing.get(name) != content:
            writes.append({"file": name, "before": existing.get(name), "after": content})
    removals = []
    if prune:
        removals = sorted(
            n for n, text in existing.items() if n not in names and text is not None and text.startswith(head)
        )
    return writes, removals
