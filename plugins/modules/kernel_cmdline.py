#!/usr/bin/python
# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: kernel_cmdline
short_description: Manage kernel command-line arguments on GRUB, BLS, kernel-install and ostree hosts
version_added: 0.1.0
author:
  - confidential.tee maintainers (@confidential-tee)
description:
  - Adds and removes kernel arguments token by token, never by substring (C(tdx=1) does not match
    C(kvm_intel.tdx=1)), and leaves every other argument byte for byte as it was.
  - Detects the boot setup from the files present and edits the right place. Debian/Ubuntu GRUB gets a
    drop-in C(/etc/default/grub.d/<name>.cfg) extending C(GRUB_CMDLINE_LINUX), then C(update-grub).
    Fedora/RHEL BLS entries are changed with C(grubby --update-kernel=ALL --args/--remove-args).
    kernel-install hosts get C(/etc/kernel/cmdline) edited. ostree hosts get C(rpm-ostree kargs).
  - Anything else fails with a message naming what was found.
  - A C(present) argument makes its name single-valued, replacing a different value of the same name.
    Names of module parameters (with a dot) compare C(-) and C(_) alike, as the kernel does.
  - Arguments after a bare C(--) belong to init and are never touched.
  - Files are backed up before they change and written atomically. Commands run only when something
    changes and never in check mode. With a I(host_root) other than C(/) they run through C(chroot).
extends_documentation_fragment:
  - confidential.tee.host_root
options:
  present:
    description:
      - Arguments that must be on the configured command line, as C(name) or C(name=value).
    type: list
    elements: str
    default: []
  absent:
    description:
      - Arguments to remove. C(name) removes every value of that name, C(name=value) only that value.
    type: list
    elements: str
    default: []
  name:
    description:
      - Stem of the GRUB drop-in C(/etc/default/grub.d/<name>.cfg) that holds the arguments this task adds.
      - Use one name per role so that roles do not overwrite each other's arguments.
    type: str
    default: confidential-tee
  boot_setup:
    description:
      - Boot setup to edit. C(auto) picks the first found of ostree (C(/run/ostree-booted)), BLS with
        grubby, GRUB (C(/etc/default/grub)) and kernel-install (C(/etc/kernel/cmdline)).
    type: str
    choices: [auto, grub, bls, kernel_install, ostree]
    default: auto
  backup:
    description:
      - Copy each file to C(<file>.<timestamp>~) before changing it.
    type: bool
    default: true
attributes:
  check_mode:
    support: full
    description: Reports the exact actions (files and commands) without performing any.
  diff_mode:
    support: full
    description: Shows the configured arguments before and after, one per line, and each changed file.
"""

EXAMPLES = r"""
- name: Enable TDX in KVM and keep hibernation off
  confidential.tee.kernel_cmdline:
    present:
      - kvm_intel.tdx=1
      - nohibernate
    name: 90-tdx-host

- name: Drop iommu=pt, which disables SEV-SNP
  confidential.tee.kernel_cmdline:
    absent:
      - iommu=pt

- name: Plan against a node tree mounted at /host, changing nothing
  confidential.tee.kernel_cmdline:
    host_root: /host
    present: [intel_iommu=on]
  check_mode: true
"""

RETURN = r"""
setup:
  description: Boot setup that was edited (C(grub), C(bls), C(kernel_install) or C(ostree)).
  returned: always
  type: str
  sample: grub
source:
  description: Where the configured arguments were read from.
  returned: always
  type: str
  sample: GRUB_CMDLINE_LINUX + GRUB_CMDLINE_LINUX_DEFAULT
configured:
  description: Configured arguments after this task (what the next boot gets from the edited setup).
  returned: always
  type: list
  elements: str
  sample: [quiet, kvm_intel.tdx=1, nohibernate]
running:
  description: Arguments of the running kernel (C(/proc/cmdline)); null when that file is missing.
  returned: always
  type: list
  elements: str
  sample: [BOOT_IMAGE=/vmlinuz, root=/dev/sda1, ro, quiet]
reboot_required:
  description: True when the running kernel does not yet have what was requested.
  returned: always
  type: bool
  sample: true
actions:
  description: Actions taken, or in check mode the actions that would be taken.
  returned: always
  type: list
  elements: dict
  sample:
    - kind: write
      description: create /etc/default/grub.d/90-tdx-host.cfg (GRUB_CMDLINE_LINUX)
      path: /etc/default/grub.d/90-tdx-host.cfg
    - kind: command
      description: regenerate the GRUB configuration
      argv: [/usr/sbin/update-grub]
backups:
  description: Backup copies made before files changed (full paths, including I(host_root)).
  returned: always
  type: list
  elements: str
  sample: [/etc/default/grub.2026-11-22@12:00:00~]
"""

import os
import traceback

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.confidential.tee.plugins.module_utils.kernel_cmdline import (
    CmdlineError,
    Executor,
    plan,
    reboot_required,
    running_cmdline,
)


def _diffs(result_plan, host_root):
    diffs = [
        {
            "before_header": f"kernel arguments ({result_plan.source})",
            "after_header": f"kernel arguments ({result_plan.source})",
            "before": "".join(f"{raw}\n" for raw in result_plan.before),
            "after": "".join(f"{raw}\n" for raw in result_plan.configured),
        }
    ]
    for action in result_plan.actions:
        if action.kind in ("write", "remove"):
            diffs.append(
                {
                    "before_header": os.path.join(host_root, action.path.lstrip("/")),
                    "after_header": os.path.join(host_root, action.path.lstrip("/")),
                    "before": action.before or "",
                    "after": action.content or "",
                }
            )
    return diffs


def main():
    module = AnsibleModule(
        argument_spec=dict(
            host_root=dict(type="path", default="/"),
            present=dict(type="list", elements="str", default=[]),
            absent=dict(type="list", elements="str", default=[]),
            name=dict(type="str", default="confidential-tee"),
            boot_setup=dict(type="str", default="auto", choices=["auto", "grub", "bls", "kernel_install", "ostree"]),
            backup=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    params = module.params
    host_root = params["host_root"]
    if not os.path.isdir(host_root):
        module.fail_json(msg=f"host_root {host_root} is not a directory; point it at the host's root filesystem")

    def run(argv):
        return module.run_command(argv)

    executor = Executor(host_root, module.check_mode, run, backup=params["backup"])
    try:
        result_plan = plan(host_root, params["present"], params["absent"], params["name"], params["boot_setup"])
        for action in result_plan.actions:
            executor.apply(action)
        running = running_cmdline(host_root)
        needs_reboot = reboot_required(running, params["present"], params["absent"])
    except CmdlineError as exc:
        module.fail_json(msg=str(exc), actions=executor.done, backups=executor.backups)
    except OSError as exc:
        module.fail_json(
            msg=f"kernel_cmdline could not complete: {exc}; the actions recorded so far show how far it got",
            actions=executor.done,
            backups=executor.backups,
            exception=traceback.format_exc(),
        )

    result = dict(
        changed=result_plan.changed,
        setup=result_plan.setup,
        source=result_plan.source,
        configured=result_plan.configured,
        running=running,
        reboot_required=needs_reboot,
        actions=executor.done,
        backups=executor.backups,
    )
    if module._diff:
        result["diff"] = _diffs(result_plan, host_root)
    for warning in result_plan.warnings:
        module.warn(warning)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
