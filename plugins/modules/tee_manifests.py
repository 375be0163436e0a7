#!/usr/bin/python
# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: tee_manifests
short_description: Keep a GitOps directory in step with rendered Kubernetes manifests, one file per object
version_added: 0.1.0
description:
  - Writes each manifest whose text changed (atomically, mode 0644) and, with O(prune), removes the files the
    same O(owner) wrote before and no longer renders. Files of other owners, and files that are not this
    collection's, are never touched.
  - "Every manifest starts with the line C(# confidential.tee owner: <owner>); the names and contents come from
    the C(confidential.tee.manifest_files) filter, which also fixes the order (file name order is apply order)."
  - Manifests in O(secret_files) (Kubernetes Secrets) are written mode 0600, their text never appears in the
    result or the diff (only a SHA-256 of it), and the option is C(no_log).
  - Meant to run on the controller (C(delegate_to) C(localhost)); one call per owner.
author:
  - confidential.tee maintainers (@confidential-tee)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    description: Reports the files it would write or remove and writes nothing.
  diff_mode:
    support: full
    description: Shows each file's old and new text (for O(secret_files), only that it changed).
  platform:
    platforms: posix
options:
  dest:
    description: The manifest directory (created when missing).
    type: path
    required: true
  files:
    description: C(file) (a plain file name) and C(content) per manifest.
    type: list
    elements: dict
    default: []
  secret_files:
    description: Like O(files), for manifests that hold secrets (Kubernetes Secrets); counted, never shown.
    type: list
    elements: dict
    default: []
  owner:
    description: Who wrote the files (a role name); scopes pruning.
    type: str
    required: true
  prune:
    description: Remove this owner's files that are not in O(files).
    type: bool
    default: true
seealso:
  - module: confidential.tee.tee_key_pools
"""

EXAMPLES = r"""
- name: Write the RuntimeClasses for GitOps
  confidential.tee.tee_manifests:
    dest: gitops/cluster
    owner: kata_runtimeclasses
    files: "{{ classes | confidential.tee.manifest_files('kata_runtimeclasses') }}"
  delegate_to: localhost
"""

RETURN = r"""
written:
  description: Files written (or that would be, in check mode).
  returned: always
  type: list
  elements: str
  sample: [30-runtimeclass-kata-qemu-tdx.yaml]
written_secrets:
  description: How many O(secret_files) were written (or would be); their names are not returned.
  returned: always
  type: int
  sample: 2
removed:
  description: Files removed (or that would be).
  returned: always
  type: list
  elements: str
"""

import hashlib
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.confidential.tee.plugins.module_utils.common.file_writer import atomic_write
from ansible_collections.confidential.tee.plugins.module_utils.common.manifests import ManifestError, plan_directory


def _read_directory(dest):
    """``{file name: text or None}`` of the *.yaml files directly in ``dest``."""
    existing = {}
    if not os.path.isdir(dest):
        return existing
    for name in os.listdir(dest):
        path = os.path.join(dest, name)
        if name.endswith(".yaml") and os.path.isfile(path) and not os.path.islink(path):
            try:
                with open(path, encoding="utf-8") as handle:
                    existing[name] = handle.read()
            except (OSError, UnicodeDecodeError):
                existing[name] = None
    return existing


def _diff(path, before, after, secret=False):
    if secret:
        # Only that a Secret changed: a digest of each side, never the (base64, not encrypted) data.
        before, after = (_digest(text) for text in (before, after))
    return {"before_header": path, "after_header": path, "before": before, "after": after}


def _digest(text):
    return (
        "(a Secret: content not shown, sha256 %s)\n" % hashlib.sha256(text.encode("utf-8")).hexdigest() if text else ""
    )


def _write_private(path, text):
    """A Secret's manifest: mode 0600 from the first byte (the old file's mode does not carry over)."""
    if os.path.exists(path):
        os.chmod(path, 0o600)
    atomic_write(path, text, mode=0o600)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "dest": {"type": "path", "required": True},
            "files": {"type": "list", "elements": "dict", "default": []},
            "secret_files": {"type": "list", "elements": "dict", "default": [], "no_log": True},
            "owner": {"type": "str", "required": True},
            "prune": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
    )
    dest, owner = module.params["dest"], module.params["owner"]
    if os.path.exists(dest) and not os.path.isdir(dest):
        module.fail_json(msg="dest %s exists and is not a directory; give a directory for the manifests" % dest)
    existing = _read_directory(dest)
    try:
        wanted = module.params["files"] + module.params["secret_files"]
        writes, removals = plan_directory(existing, wanted, owner, module.params["prune"])
    except ManifestError as exc:
        module.fail_json(msg=str(exc))
    secrets = {item.get("file") for item in module.params["secret_files"]}
    diff = [_diff(os.path.join(dest, w["file"]), w["before"] or "", w["after"], w["file"] in secrets) for w in writes]
    diff += [_diff(os.path.join(dest, name), existing[name], "", True) for name in removals]
    if not module.check_mode:
        try:
            for write in writes:
                path = os.path.join(dest, write["file"])
                if write["file"] in secrets:
                    _write_private(path, write["after"])
                else:
                    atomic_write(path, write["after"], default_mode=0o644)
            for name in removals:
                os.unlink(os.path.join(dest, name))
        except OSError as exc:
            module.fail_json(msg="cannot update %s: %s" % (dest, exc))
    module.exit_json(
        changed=bool(writes or removals),
        written=[w["file"] for w in writes if w["file"] not in secrets],
        written_secrets=len([w for w in writes if w["file"] in secrets]),
        removed=removals,
        diff=diff,
    )


if __name__ == "__main__":
    main()
