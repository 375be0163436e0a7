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
  - With O(requests), several files (one per role) in the same round trip, all written or none, and one
    C(modprobe -a) for every module they load.
extends_documentation_fragment:
  - confidential.tee.host_root
  - ansible.builtin.action_common_attributes
options:
  modules:
    description:
      - Kernel module names, such as C(vhost_vsock). C(-) and C(_) are the same to the kernel.
      - Required with O(path).
    type: list
    elements: str
  path:
    description:
      - The C(modules-load.d) file, an absolute host path (joined under O(host_root)).
      - Required unless O(requests) is given.
    type: str
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
    description: Copy each file to C(<file>.<timestamp>~) before changing or removing it.
    type: bool
    default: true
  requests:
    description:
      - Several files, one per caller (a role), managed as one change instead of O(path), O(modules), O(content),
        O(mode), O(state) and O(load) (mutually exclusive with them). Each request means what those options mean
        for one file.
      - Every request is validated before anything is written; a path given twice fails the task. The files are
        written (or removed) together, the modules that present requests load are loaded with one C(modprobe -a)
        and read back, and when that fails every file the task changed is restored.
    type: list
    elements: dict
    suboptions:
      path:
        description: The C(modules-load.d) file, as O(path).
        type: str
        required: true
      modules:
        description: Kernel module names, as O(modules).
        type: list
        elements: str
        required: true
      content:
        description: The exact text of the file, as O(content).
        type: str
      mode:
        description: Octal mode of the file, as O(mode).
        type: str
        default: "0644"
      state:
        description: C(present) writes the file (and loads its modules); C(absent) removes it if it is ours.
        type: str
        choices: [present, absent]
        default: present
      load:
        description: Load this request's missing modules now, as O(load).
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

- name: Two roles' files for the next boot of a node mounted at /host, in one round trip (both written or neither)
  confidential.tee.kernel_modules:
    host_root: /host
    requests:
      - path: /etc/modules-load.d/vsock.conf
        modules: [vhost_vsock, vsock_loopback]
        load: false
      - path: /etc/modules-load.d/vfio.conf
        modules: [vfio, vfio_iommu_type1, vfio_pci]
        content: |
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
changes:
  description:
    - What changed, in the shape every module of this collection returns (docs/modules.md, result vocabulary).
    - C(written) and C(removed) (full paths, including O(host_root); in check mode what would be), C(hidden) (0
      here), C(commands) (the C(modprobe) run, by description; none in check mode), C(backups) (backup copies
      made, full paths) and C(entries) (each file with C(name), C(changed) and C(reasons) such as C(create),
      C(content), C(mode ...), C(remove)).
  returned: always
  type: dict
  sample: {"written": ["/etc/modules-load.d/vsock.conf"], "removed": [], "hidden": 0,
           "commands": ["load vsock_loopback"], "backups": [],
           "entries": [{"name": "/etc/modules-load.d/vsock.conf", "changed": true, "reasons": ["create"]}]}
files:
  description:
    - Deprecated, removed in release 0.3.0; read C(changes.entries) (C(name) instead of C(path)).
    - Each file, whether it changed and why.
  returned: always
  type: list
  elements: dict
  sample: [{"path": "/etc/modules-load.d/vsock.conf", "changed": true, "reasons": ["create"]}]
backups:
  description:
    - Deprecated, removed in release 0.3.0; read C(changes.backups).
    - Backup copies made (full paths, including O(host_root)).
  returned: always
  type: list
  elements: str
modules:
  description:
    - Each module of O(modules) (of every request) and whether the kernel has it after the task (in check mode,
      before).
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
  description:
    - With O(state=absent), the path of a file that was kept because it differs from O(content).
    - With O(requests), the first such path; RV(kept_paths) has all of them.
  returned: always
  type: str
  sample: null
kept_paths:
  description: Every file kept because it differs from what its request writes (with O(state=absent)).
  returned: always
  type: list
  elements: str
  sample: []
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.confidential.tee.plugins.module_utils.common.changes import Changes
from ansible_collections.confidential.tee.plugins.module_utils.common.errors import TeeError
from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import HostReader, open_host
from ansible_collections.confidential.tee.plugins.module_utils.common.results import file_changes_result
from ansible_collections.confidential.tee.plugins.module_utils.host.kernel_modules import (
    default_content,
    loaded_modules,
    name_problems,
)

REQUEST_OPTIONS = ("path", "modules", "content", "mode", "state", "load")


def argument_spec():
    one_file = dict(
        modules=dict(type="list", elements="str"),
        path=dict(type="str"),
        content=dict(type="str"),
        mode=dict(type="str", default="0644"),
        state=dict(type="str", choices=["present", "absent"], default="present"),
        load=dict(type="bool", default=True),
    )
    request = dict(
        one_file, modules=dict(type="list", elements="str", required=True), path=dict(type="str", required=True)
    )
    return dict(
        host_root=dict(type="path", default="/"),
        requests=dict(type="list", elements="dict", options=request),
        backup=dict(type="bool", default=True),
        **one_file,
    )


def requests_of(params) -> list[dict]:
    """The files this task manages: O(requests), or the one file of the top-level options."""
    if params["requests"] is not None:
        return params["requests"]
    return [{name: params[name] for name in REQUEST_OPTIONS}]


def request_problems(request: dict, host: HostReader) -> list[str]:
    """Why one request cannot be applied (empty when it can)."""
    problems = name_problems(request["modules"])
    if not request["path"].startswith("/"):
        problems.append(f"path {request['path']!r} is not absolute: give the host path, such as /etc/modules-load.d/x")
    if mode_of(request) is None:
        problems.append(f"mode {request['mode']!r} is not an octal mode such as '0644'")
    if request["state"] == "present" and request["load"] and not host.is_live:
        problems.append(
            f"load: true loads modules into the kernel running this task, which is not the one under host_root "
            f"{host.host_root}: set load: false there (the file still loads them at the host's next boot)"
        )
    return problems


def mode_of(request: dict) -> int | None:
    try:
        mode = int(request["mode"], 8)
    except ValueError:
        return None
    return mode if 0 <= mode <= 0o7777 else None


def checked_requests(params, host: HostReader) -> list[tuple[dict, str, int]]:
    """Each request with its file's content and mode, once every input of every request is known to be usable."""
    requests = requests_of(params)
    several = params["requests"] is not None
    problems = [] if requests else ["requests is empty: give at least one modules-load file"]
    paths = [request["path"] for request in requests]
    problems += [f"requests: {path!r} is given twice" for path in sorted(set(paths)) if paths.count(path) > 1]
    for index, request in enumerate(requests):
        found = request_problems(request, host)
        problems += [f"requests[{index}] ({request['path']}): {problem}" for problem in found] if several else found
    if problems:
        raise TeeError("; ".join(problems) + "; nothing was changed")
    checked = []
    for request in requests:
        content = request["content"] if request["content"] is not None else default_content(request["modules"])
        checked.append((request, content, mode_of(request)))
    return checked


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


def plan(changes: Changes, checked: list[tuple[dict, str, int]]) -> tuple[list[str], list[str]]:
    """Plan every file; the modules to load (present requests with load, missing from the kernel) and kept paths."""
    to_load: list[str] = []
    kept: list[str] = []
    for request, content, mode in checked:
        if request["state"] == "absent":
            kept += [path for path in [plan_removal(changes, request["path"], content)] if path]
            continue
        changes.file(request["path"], content, mode=mode)
        if request["load"]:
            missing = [
                name for name, loaded in loaded_modules(changes.reader, request["modules"]).items() if not loaded
            ]
            to_load += [name for name in missing if name not in to_load]
    return to_load, kept


def apply(module: AnsibleModule, changes: Changes) -> tuple[list[str], list[str]]:
    """Plan and make the change, all files or none; the modules loaded (or to load, in check mode) and kept paths."""
    to_load, kept = plan(changes, checked_requests(module.params, changes.reader))
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
    return to_load, kept


def main():
    module = AnsibleModule(
        argument_spec=argument_spec(),
        mutually_exclusive=[("requests", name) for name in REQUEST_OPTIONS],
        required_one_of=[("requests", "path")],
        required_together=[("path", "modules")],
        supports_check_mode=True,
    )
    changes = Changes(open_host(module), module.check_mode, backup=module.params["backup"], runner=module.run_command)
    try:
        loaded, kept = apply(module, changes)
    except (TeeError, OSError) as exc:
        module.fail_json(msg=str(exc), **file_changes_result(changes))
    for path in kept:
        module.warn(
            f"{changes.display(path)} differs from what this task writes (someone edited or wrote it): it is kept; "
            "delete it by hand if these modules should no longer load at boot"
        )
    named = list(dict.fromkeys(name for request in requests_of(module.params) for name in request["modules"]))
    result = dict(
        changed=changes.changed or bool(loaded),
        **file_changes_result(changes),
        modules=loaded_modules(changes.reader, named),
        loaded=loaded,
        kept=changes.display(kept[0]) if kept else None,
        kept_paths=[changes.display(path) for path in kept],
    )
    if module._diff:
        result["diff"] = changes.diff()
    module.exit_json(**result)


if __name__ == "__main__":
    main()
