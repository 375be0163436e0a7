#!/usr/bin/python
# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: kernel_modules
short_description: Load kernel modules now and at every boot (a modules-load.d file), in one task
version_added: 0.1.0
author:
  - confidential.tee maintainers (@confidential-tee)
description:
  - Writes O(path), the C(modules-load.d) file that systemd-modules-load reads at every boot, and loads the modules of
    O(modules) that the running kernel lacks with one C(modprobe -a), in one round trip to the host.
  - A module counts as loaded when the kernel shows it in C(/sys/module) or lists it as built in
    (C(/lib/modules/<release>/modules.builtin)); after loading, each one is read back there, and a module still
    missing fails the task.
  - The file is written through the collection's one change recorder (atomic, backed up, read back). When
    C(modprobe) fails, the file is restored as it was, so a module that cannot load is not left to fail at every
    boot.
  - O(state=absent) removes O(path) only when it holds exactly O(content), the text this task would write; a file
    someone edited is kept and named in RV(kept) and a warning. Modules are never unloaded.
extends_documentation_fragment:
  - confidential.tee.host_root
  - ansible.builtin.action_common_attributes
options:
  modules:
    description:
      - Kernel module names, such as C(vhost_vsock). C(-) and C(_) are the same to the kernel.
    type: list
    elements: str
    required: true
  path:
    description: The C(modules-load.d) file, an absolute host path (joined under O(host_root)).
    type: str
    required: true
  content:
    description:
      - The exact text of O(path); by default one module of O(modules) a line.
      - With O(state=absent), the text the file must hold to be removed.
    type: str
  mode:
    description: Octal mode of O(path) as a string.
    type: str
    default: "0644"
  state:
    description: C(present) writes O(path) and loads the modules; C(absent) removes O(path) if it is ours.
    type: str
    choices: [present, absent]
    default: present
  load:
    description:
      - Load the missing modules now (O(state=present) only). Needs O(host_root=/), because under another root the
        running kernel is not the host's; set it to C(false) there (and in containers, which cannot load modules).
    type: bool
    default: true
  backup:
    description: Copy O(path) to C(<file>.<timestamp>~) before changing or removing it.
    type: bool
    default: true
attributes:
  check_mode:
    support: full
    description: Reports the file change and the modules it would load, from the same plan as a real run.
  diff_mode:
    support: full
    description: Shows O(path) before and after.
  platform:
    platforms: posix
notes:
  - Like C(community.general.modprobe) with C(persistent=present), but for several modules in one file and one call,
    with the read-back and the all-or-nothing write of this collection.
seealso:
  - module: confidential.tee.host_files
  - name: modules-load.d(5)
    description: The files systemd-modules-load reads at boot.
    link: https://www.freedesktop.org/software/systemd/man/latest/modules-load.d.html
"""

EXAMPLES = r"""
# example: skip: it loads modules into the kernel running it; the other examples run against a node tree
- name: Load the vsock modules now and at every boot
  confidential.tee.kernel_modules:
    modules: [vhost_vsock, vsock_loopback]
    path: /etc/modules-load.d/vsock.conf

- name: List the vfio modules for the next boot of a node mounted at /host
  confidential.tee.kernel_modules:
    host_root: /host
    modules: [vfio, vfio_iommu_type1, vfio_pci]
    path: /etc/modules-load.d/vfio.conf
    content: |
      # Managed by confidential.tee.iommu_passthrough
      vfio
      vfio_iommu_type1
      vfio_pci
    load: false

- name: Remove that file again, unless someone edited it
  confidential.tee.kernel_modules:
    host_root: /host
    modules: [vfio, vfio_iommu_type1, vfio_pci]
    path: /etc/modules-load.d/vfio.conf
    content: |
      # Managed by confidential.tee.iommu_passthrough
      vfio
      vfio_iommu_type1
      vfio_pci
    state: absent
"""

RETURN = r"""
files:
  description: The file, whether it changed and why (C(create), C(content), C(mode ...), C(remove)).
  returned: always
  type: list
  elements: dict
  sample: [{"path": "/etc/modules-load.d/vsock.conf", "changed": true, "reasons": ["create"]}]
backups:
  description: Backup copies made (full paths, including O(host_root)).
  returned: always
  type: list
  elements: str
modules:
  description: Each module of O(modules) and whether the kernel has it after the task (in check mode, before).
  returned: always
  type: dict
  sample: {"vhost_vsock": true, "vsock_loopback": true}
loaded:
  description: The modules this task loaded (in check mode, would load).
  returned: always
  type: list
  elements: str
  sample: [vsock_loopback]
kept:
  description: With O(state=absent), the path of a file that was kept because it differs from O(content).
  returned: always
  type: str
  sample: null
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.confidential.tee.plugins.module_utils.common.changes import Changes
from ansible_collections.confidential.tee.plugins.module_utils.common.errors import TeeError
from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import open_host
from ansible_collections.confidential.tee.plugins.module_utils.host.kernel_modules import (
    default_content,
    loaded_modules,
    name_problems,
)


def argument_spec():
    return dict(
        host_root=dict(type="path", default="/"),
        modules=dict(type="list", elements="str", required=True),
        path=dict(type="str", required=True),
        content=dict(type="str"),
        mode=dict(type="str", default="0644"),
        state=dict(type="str", choices=["present", "absent"], default="present"),
        load=dict(type="bool", default=True),
        backup=dict(type="bool", default=True),
    )


def checked_params(params) -> tuple[str, int]:
    """The file's content and mode, once every input is known to be usable."""
    problems = name_problems(params["modules"])
    if not params["path"].startswith("/"):
        problems.append(f"path {params['path']!r} is not absolute: give the host path, such as /etc/modules-load.d/x")
    try:
        mode = int(params["mode"], 8)
    except ValueError:
        mode = -1
    if not 0 <= mode <= 0o7777:
        problems.append(f"mode {params['mode']!r} is not an octal mode such as '0644'")
    if params["state"] == "present" and params["load"] and params["host_root"].rstrip("/") != "":
        problems.append(
            f"load: true loads modules into the kernel running this task, which is not the one under host_root "
            f"{params['host_root']}: set load: false there (the file still loads them at the host's next boot)"
        )
    if problems:
        raise TeeError("; ".join(problems) + "; nothing was changed")
    content = params["content"] if params["content"] is not None else default_content(params["modules"])
    return content, mode


def plan_removal(changes: Changes, path: str, content: str) -> str | None:
    """Plan removing ``path`` when it holds exactly ``content``; the path when it differs (kept), else None."""
    current = changes.reader.read(path, record=False)
    if not current.exists:
        return None
    if current.data is None:
        raise TeeError(f"{changes.display(path)} {current.problem.describe() if current.problem else 'unreadable'}")
    if current.data != content.encode("utf-8"):
        return path
    changes.file(path, None)
    return None


def apply(module: AnsibleModule, changes: Changes) -> tuple[list[str], str | None]:
    """Plan and make the change; the modules loaded (or to load, in check mode) and a kept path."""
    params = module.params
    content, mode = checked_params(params)
    if params["state"] == "absent":
        kept = plan_removal(changes, params["path"], content)
        changes.apply()
        return [], kept
    changes.file(params["path"], content, mode=mode)
    missing = [name for name, loaded in loaded_modules(changes.reader, params["modules"]).items() if not loaded]
    to_load = missing if params["load"] else []
    if to_load and not module.check_mode:
        modprobe = module.get_bin_path("modprobe")
        if modprobe is None:
            raise TeeError(f"modprobe is not on this host, so {', '.join(to_load)} cannot be loaded: install kmod")
        changes.command([modprobe, "-a", "--", *to_load], f"load {', '.join(to_load)}")
    changes.apply()
    if to_load and not module.check_mode:
        still = [name for name, loaded in loaded_modules(changes.reader, to_load).items() if not loaded]
        if still:
            changes.rollback()
            raise TeeError(
                f"modprobe exited 0 but the kernel does not show {', '.join(still)} in /sys/module or modules.builtin"
                f"{changes.restored()}"
            )
    return to_load, None


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    reader = open_host(module)
    changes = Changes(reader.host_root, module.check_mode, backup=module.params["backup"], runner=module.run_command)
    try:
        loaded, kept = apply(module, changes)
    except (TeeError, OSError) as exc:
        module.fail_json(msg=str(exc), files=changes.records(), backups=changes.backups)
    if kept:
        module.warn(
            f"{changes.display(kept)} differs from what this task writes (someone edited or wrote it): it is kept; "
            "delete it by hand if these modules should no longer load at boot"
        )
    modules = loaded_modules(changes.reader, module.params["modules"])
    result = dict(
        changed=changes.changed or bool(loaded),
        files=changes.records(),
        backups=changes.backups,
        modules=modules,
        loaded=loaded,
        kept=changes.display(kept) if kept else None,
    )
    if module._diff:
        result["diff"] = changes.diff()
    module.exit_json(**result)


if __name__ == "__main__":
    main()
