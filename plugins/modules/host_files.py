#!/usr/bin/python
# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: host_files
short_description: Write a role's files on a host, under host_root, all or nothing
version_added: 0.1.0
author:
  - confidential.tee maintainers (@confidential-tee)
description:
  - Writes each file of O(files) under O(host_root) through the collection's one change recorder, the same
    one M(confidential.tee.dcap_config) and M(confidential.tee.kernel_cmdline) use.
  - Paths are host paths; symbolic links are followed inside O(host_root), as C(chroot) would, never to the
    machine running the module. Files are written atomically (a 0600 temporary file, C(fsync), rename), after a
    C(<file>.<timestamp>~) backup, and read back.
  - The whole list is validated first (owners and groups in the host's C(/etc/passwd) and C(/etc/group), no
    directory or special file in the way, parent directories creatable); if any write fails, every file of the
    task is restored as it was and the directories it created are removed.
  - The content of a file marked O(files[].secret) never appears in the result, the diff or a message (only a
    SHA-256 of it); set C(no_log) on the task too, so that Ansible does not log its arguments.
extends_documentation_fragment:
  - confidential.tee.host_root
  - ansible.builtin.action_common_attributes
options:
  files:
    description: The files to write.
    type: list
    elements: dict
    required: true
    suboptions:
      path:
        description: Absolute host path (joined under O(host_root)).
        type: str
        required: true
      content:
        description: The exact text of the file. Exactly one of O(files[].content) and O(files[].src) is given.
        type: str
      src:
        description:
          - Another host path (under O(host_root)) whose bytes this file gets, such as a generated CA certificate
            copied into the trust store. It is read through the collection's host reader (regular files only,
            symbolic links resolved inside O(host_root), at most 1 MiB).
        type: str
      mode:
        description:
          - Octal mode as a string (C("0644")); when omitted an existing file keeps its mode and a new one gets 0644
            (0600 when O(files[].secret)).
        type: str
      owner:
        description: User name (from the host's C(/etc/passwd)) or number.
        type: str
      group:
        description: Group name (from the host's C(/etc/group)) or number.
        type: str
      secret:
        description: The content is a secret (a private key), so mode 0600 unless given, and never shown.
        type: bool
        default: false
  backup:
    description: Copy each file to C(<file>.<timestamp>~) before changing it.
    type: bool
    default: true
attributes:
  check_mode:
    support: full
    description: Reports every file that would change, and why, without writing.
  diff_mode:
    support: full
    description: Shows each changed file before and after (a digest for secret files).
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Load the vfio modules at every boot
  confidential.tee.host_files:
    host_root: /host
    files:
      - path: /etc/modules-load.d/vfio.conf
        content: "vfio\nvfio_pci\n"
        mode: "0644"

# example: skip: the pccs user and group come with Intel's sgx-dcap-pccs package
- name: Install the PCCS TLS key
  confidential.tee.host_files:
    files:
      - path: /opt/intel/sgx-dcap-pccs/ssl_key/private.pem
        content: "{{ vault_pccs_tls_key }}"
        owner: pccs
        group: pccs
        secret: true
  no_log: true

# example: skip: ca.crt is what the tdx_attestation role generates on a PCCS host
- name: Trust the PCCS CA that the PCCS role generated (both paths inside host_root)
  confidential.tee.host_files:
    host_root: /host
    files:
      - path: /usr/local/share/ca-certificates/confidential-tee-pccs.crt
        src: /opt/intel/sgx-dcap-pccs/ssl_key/ca.crt
        mode: "0644"
"""

RETURN = r"""
changes:
  description:
    - What changed, in the shape every module of this collection returns (docs/modules.md, result vocabulary).
    - C(written) and C(removed) (full paths, including O(host_root); in check mode what would be), C(hidden) (0
      here), C(commands) (empty here), C(backups) (backup copies made, full paths) and C(entries) (each file with
      C(name), C(changed) and C(reasons) such as C(create), C(content), C(mode ...), C(owner ...)).
  returned: always
  type: dict
  sample: {"written": ["/etc/modules-load.d/vfio.conf"], "removed": [], "hidden": 0, "commands": [], "backups": [],
           "entries": [{"name": "/etc/modules-load.d/vfio.conf", "changed": true, "reasons": ["create"]}]}
files:
  description:
    - Deprecated, removed in release 0.3.0; read C(changes.entries) (C(name) instead of C(path)).
    - Each file, whether it changed and why.
  returned: always
  type: list
  elements: dict
  sample: [{"path": "/etc/modules-load.d/vfio.conf", "changed": true, "reasons": ["create"]}]
backups:
  description: Deprecated, removed in release 0.3.0; read C(changes.backups). Backup copies made (full paths).
  returned: always
  type: list
  elements: str
  sample: [/etc/modules-load.d/vfio.conf.2026-11-22@12:00:00~]
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.confidential.tee.plugins.module_utils.common.changes import Changes
from ansible_collections.confidential.tee.plugins.module_utils.common.errors import TeeError
from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import open_host
from ansible_collections.confidential.tee.plugins.module_utils.common.results import file_changes_result


def argument_spec():
    return dict(
        host_root=dict(type="path", default="/"),
        files=dict(
            type="list",
            elements="dict",
            required=True,
            options=dict(
                path=dict(type="str", required=True),
                content=dict(type="str"),
                src=dict(type="str"),
                mode=dict(type="str"),
                owner=dict(type="str"),
                group=dict(type="str"),
                secret=dict(type="bool", default=False),
            ),
            mutually_exclusive=[("content", "src")],
            required_one_of=[("content", "src")],
        ),
        backup=dict(type="bool", default=True),
    )


def parse_mode(path, mode):
    """``"0644"`` to 0o644; anything else is refused, naming the file."""
    if mode is None:
        return None
    try:
        value = int(str(mode), 8)
    except ValueError:
        value = -1
    if not 0 <= value <= 0o7777:
        raise TeeError(f"files: mode {mode!r} of {path} is not an octal mode such as '0644'")
    return value


# A certificate or a small configuration file; anything larger is not what a role copies on a host.
SRC_LIMIT = 1024 * 1024


def planned_content(reader, item):
    """The bytes ``item`` asks for: its ``content``, or the host file ``src`` read through the host reader."""
    if item["src"] is None:
        return item["content"]
    if not item["src"].startswith("/"):
        raise TeeError(f"files: src {item['src']!r} of {item['path']} is not absolute: give the host path")
    read = reader.read(item["src"], limit=SRC_LIMIT, expected=True, record=False)
    if read.data is None:
        raise TeeError(f"files: src of {item['path']}: {read.problem.describe()}")
    return read.data


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    reader = open_host(module)
    changes = Changes(reader, module.check_mode, backup=module.params["backup"])
    changes.add_secrets(item["content"] for item in module.params["files"] if item["secret"])
    try:
        for item in module.params["files"]:
            if not item["path"].startswith("/"):
                raise TeeError(f"files: path {item['path']!r} is not absolute: give the host path, such as /etc/x")
            changes.file(
                item["path"],
                planned_content(reader, item),
                mode=parse_mode(item["path"], item["mode"]),
                owner=item["owner"],
                group=item["group"],
                secret=item["secret"],
            )
        changes.apply()
    except (TeeError, OSError) as exc:
        module.fail_json(msg=changes.redact(str(exc)), **file_changes_result(changes))
    result = dict(changed=changes.changed, **file_changes_result(changes))
    if module._diff:
        result["diff"] = changes.diff()
    module.exit_json(**changes.redact(result))


if __name__ == "__main__":
    main()
