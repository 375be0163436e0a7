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
  - A file at a name this owner writes that this collection did not write (no owner line), or that another
    owner wrote, is refused by name and never overwritten.
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
  staged_for:
    description:
      - The real manifest directory when O(dest) is its stage (M(confidential.tee.tee_manifest_stage)).
      - The stage is private scratch space, so it is written also in check mode (the commit then shows the
        diff and writes nothing); messages name this directory instead of the stage.
    type: path
    version_added: 0.1.0
seealso:
  - module: confidential.tee.tee_manifest_stage
  - module: confidential.tee.tee_key_pools
"""

EXAMPLES = r"""
# example: skip: classes are the objects a role rendered (kata_runtimeclasses)
- name: Write the RuntimeClasses for GitOps
  confidential.tee.tee_manifests:
    dest: gitops/cluster
    owner: kata_runtimeclasses
    files: "{{ classes | confidential.tee.manifest_files('kata_runtimeclasses') }}"
  delegate_to: localhost
"""

RETURN = r"""
changes:
  description:
    - What changed, in the shape every module of this collection returns (docs/modules.md, result vocabulary).
    - C(written) and C(removed) (full paths under O(dest), or under O(staged_for) when given; in check mode what
      would be), C(hidden) (how many O(secret_files) were written; their names are not returned), C(commands) and
      C(backups) (empty here; no backups in a GitOps directory) and C(entries) (each file but the Secrets written,
      with C(name), C(changed) and C(reasons)).
  returned: always
  type: dict
  sample: {"written": ["/srv/gitops/30-runtimeclass-kata-qemu-tdx.yaml"], "removed": [], "hidden": 2,
           "commands": [], "backups": [],
           "entries": [{"name": "/srv/gitops/30-runtimeclass-kata-qemu-tdx.yaml", "changed": true,
                        "reasons": ["create"]}]}
written:
  description:
    - Deprecated, removed in release 0.3.0; read C(changes.written) (full paths).
    - Files written (or that would be, in check mode), by name.
  returned: always
  type: list
  elements: str
  sample: [30-runtimeclass-kata-qemu-tdx.yaml]
written_secrets:
  description:
    - Deprecated, removed in release 0.3.0; read C(changes.hidden).
    - How many O(secret_files) were written (or would be); their names are not returned.
  returned: always
  type: int
  sample: 2
removed:
  description:
    - Deprecated, removed in release 0.3.0; read C(changes.removed) (full paths).
    - Files removed (or that would be), by name.
  returned: always
  type: list
  elements: str
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.confidential.tee.plugins.module_utils.common.changes import Changes
from ansible_collections.confidential.tee.plugins.module_utils.common.errors import TeeError
from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import local_host
from ansible_collections.confidential.tee.plugins.module_utils.common.manifests import ManifestError, plan_directory
from ansible_collections.confidential.tee.plugins.module_utils.common.results import recorded_changes


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


def record(changes, dest, writes, removals, secrets):
    """Every write and removal of this owner's manifests, planned in the one change recorder.

    A Secret's manifest is mode 0600 from its first byte and only a digest of it is ever shown; removed files
    are shown as digests too (they may have been Secrets). No backups: a ``~`` copy in a GitOps directory
    would be committed.
    """
    for write in writes:
        secret = write["file"] in secrets
        changes.file(os.path.join(dest, write["file"]), write["after"], mode=0o600 if secret else None, secret=secret)
    for name in removals:
        changes.file(os.path.join(dest, name), None, secret=True)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "dest": {"type": "path", "required": True},
            "files": {"type": "list", "elements": "dict", "default": []},
            "secret_files": {"type": "list", "elements": "dict", "default": [], "no_log": True},
            "owner": {"type": "str", "required": True},
            "prune": {"type": "bool", "default": True},
            "staged_for": {"type": "path"},
        },
        supports_check_mode=True,
    )
    dest, owner = os.path.abspath(module.params["dest"]), module.params["owner"]
    shown_dest = module.params["staged_for"] or dest
    if os.path.exists(dest) and not os.path.isdir(dest):
        module.fail_json(msg="dest %s exists and is not a directory; give a directory for the manifests" % dest)
    existing = _read_directory(dest)
    try:
        wanted = module.params["files"] + module.params["secret_files"]
        writes, removals = plan_directory(existing, wanted, owner, module.params["prune"])
    except ManifestError as exc:
        module.fail_json(msg="%s (in %s, for %s; nothing was written)" % (exc, shown_dest, owner))
    secrets = {item.get("file") for item in module.params["secret_files"]}
    # A stage is scratch space: written also in check mode, so the commit can show what would change.
    staged = module.params["staged_for"] is not None
    changes = Changes(local_host(), module.check_mode and not staged, backup=False)
    changes.add_secrets(item.get("content") for item in module.params["secret_files"])
    try:
        record(changes, dest, writes, removals, secrets)
        changes.apply()
    except (TeeError, OSError) as exc:
        module.fail_json(msg=changes.redact("cannot update %s: %s" % (dest, exc)))
    module.exit_json(
        changed=bool(writes or removals),
        changes=recorded_changes(
            changes, hide_secret_names=True, name=lambda path: os.path.join(shown_dest, os.path.relpath(path, dest))
        ),
        written=[w["file"] for w in writes if w["file"] not in secrets],
        written_secrets=len([w for w in writes if w["file"] in secrets]),
        removed=removals,
        diff=changes.diff(),
    )


if __name__ == "__main__":
    main()
