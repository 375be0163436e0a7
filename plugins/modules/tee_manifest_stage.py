#!/usr/bin/python
# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: tee_manifest_stage
short_description: Stage a GitOps directory so that several roles write it all or nothing
version_added: 0.1.0
description:
  - "C(state=present): copies the manifests of O(dest) (its C(*.yaml) files and its C(nodes/) tree) into a new
    private staging directory next to it (C(.<name>.tee-staging-*)) and returns its path. The roles then write
    into the stage with M(confidential.tee.tee_manifests) (O(confidential.tee.tee_manifests#module:staged=true))."
  - "C(state=committed): writes the difference between the stage and O(dest) into O(dest) through the
    collection's change recorder (every file or none: any failure restores the files already written), then
    removes the stage. Manifests this collection wrote that the stage no longer holds are removed; no other file
    in O(dest) is touched."
  - "C(state=absent): removes the stage (after a failed role); O(dest) is not touched."
  - The stage is made and removed also in check mode (it is private scratch space); in check mode the commit
    reports and diffs what it would write and writes nothing to O(dest).
  - Meant to run on the controller (C(delegate_to) C(localhost)).
author:
  - confidential.tee maintainers (@confidential-tee)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    description: The stage is private scratch space and is made and removed; O(dest) is never written.
  diff_mode:
    support: full
    description: The commit shows each file's old and new text (files staged mode 0600, only that they changed).
  platform:
    platforms: posix
options:
  dest:
    description: The manifest directory, an absolute path (the playbook resolves a relative one first).
    type: path
    required: true
  state:
    description: C(present) makes the stage, C(committed) writes it into O(dest), C(absent) drops it.
    type: str
    choices: [present, committed, absent]
    default: present
  staging:
    description: The stage C(state=present) returned; required for C(committed) and C(absent).
    type: path
seealso:
  - module: confidential.tee.tee_manifests
"""

EXAMPLES = r"""
# example: skip: writes /srv/gitops/cluster, a GitOps checkout of yours (test_cluster_all_or_nothing.py stages)
- name: Stage the manifest directory
  confidential.tee.tee_manifest_stage:
    dest: /srv/gitops/cluster
  register: stage
  delegate_to: localhost

# example: skip: uses the stage of the task above
- name: Commit what every role rendered into the stage
  confidential.tee.tee_manifest_stage:
    dest: /srv/gitops/cluster
    staging: "{{ stage.staging }}"
    state: committed
  delegate_to: localhost
"""

RETURN = r"""
staging:
  description: The staging directory (C(state=present)).
  returned: when state is present
  type: str
  sample: /srv/gitops/.cluster.tee-staging-k2j3h4
changes:
  description:
    - What the commit changed, in the shape every module of this collection returns (docs/modules.md, result
      vocabulary).
    - C(written) and C(removed) (full paths under O(dest); in check mode what would be), C(hidden) (how many files
      staged mode 0600, Secrets, were written; their names are not returned), C(commands) and C(backups) (empty
      here; no backups in a GitOps directory) and C(entries) (each other file with C(name), C(changed) and
      C(reasons)).
  returned: when state is committed
  type: dict
  sample: {"written": ["/srv/gitops/30-runtimeclass-kata-qemu-tdx.yaml"], "removed": [], "hidden": 0,
           "commands": [], "backups": [],
           "entries": [{"name": "/srv/gitops/30-runtimeclass-kata-qemu-tdx.yaml", "changed": true,
                        "reasons": ["create"]}]}
written:
  description:
    - Deprecated, removed in release 0.3.0; read C(changes.written) (full paths).
    - Files written into O(dest) (or that would be), relative to it; files staged mode 0600 are only counted.
  returned: when state is committed
  type: list
  elements: str
written_private:
  description:
    - Deprecated, removed in release 0.3.0; read C(changes.hidden).
    - How many files staged mode 0600 (Secrets) were written.
  returned: when state is committed
  type: int
removed:
  description:
    - Deprecated, removed in release 0.3.0; read C(changes.removed) (full paths).
    - Manifests this collection wrote that were removed from O(dest) (or would be), relative to it.
  returned: when state is committed
  type: list
  elements: str
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.confidential.tee.plugins.module_utils.common import manifest_stage as ms
from ansible_collections.confidential.tee.plugins.module_utils.common.changes import Changes
from ansible_collections.confidential.tee.plugins.module_utils.common.errors import TeeError
from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import local_host
from ansible_collections.confidential.tee.plugins.module_utils.common.results import recorded_changes


def commit(module, dest, staging):
    """Write the stage into ``dest`` through the change recorder, all files or none; the stage is then removed."""
    staged = ms.read_tree(staging, with_mode=True)
    writes, removals = ms.plan_commit(staged, ms.read_tree(dest, with_mode=False))
    # No backups: a ~ copy in a GitOps directory would be committed. Private files are Secrets: never shown.
    changes = Changes(local_host(), module.check_mode, backup=False)
    for write in writes:
        private = write["mode"] & 0o077 == 0
        changes.file(
            os.path.join(dest, write["file"]), write["content"], mode=0o600 if private else None, secret=private
        )
    for name in removals:
        changes.file(os.path.join(dest, name), None, secret=True)
    changes.apply()
    shown = [w["file"] for w in writes if w["mode"] & 0o077]
    return {
        "changed": bool(writes or removals),
        "changes": recorded_changes(changes, hide_secret_names=True),
        "written": shown,
        "written_private": len(writes) - len(shown),
        "removed": removals,
        "diff": changes.diff(),
    }


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "dest": {"type": "path", "required": True},
            "state": {"type": "str", "default": "present", "choices": ["present", "committed", "absent"]},
            "staging": {"type": "path"},
        },
        required_if=[("state", "committed", ["staging"]), ("state", "absent", ["staging"])],
        supports_check_mode=True,
    )
    dest, state, staging = module.params["dest"], module.params["state"], module.params["staging"]
    try:
        if state == "present":
            module.exit_json(changed=False, staging=ms.stage(dest))
        if not ms.is_stage(dest, staging):
            module.fail_json(msg="%s is not a staging directory of %s; nothing was touched" % (staging, dest))
        if state == "absent":
            module.exit_json(changed=False, removed_stage=ms.remove_stage(dest, staging))
        try:
            result = commit(module, dest, staging)
        finally:
            ms.remove_stage(dest, staging)
    except (TeeError, OSError) as exc:
        module.fail_json(msg="manifest directory %s: %s (the directory was left as it was)" % (dest, exc))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
