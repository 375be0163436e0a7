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
    Fedora/RHEL BLS entries are written with the change, then C(grubby --update-kernel=ALL --args/--remove-args)
    keeps its other files in step.
    kernel-install hosts get C(/etc/kernel/cmdline) edited, then C(kernel-install add) regenerates the running
    kernel's entry from C(/usr/lib/modules/<release>/vmlinuz), or on Debian from C(/boot/vmlinuz-<release>) with
    C(/boot/initrd.img-<release>). ostree hosts get C(rpm-ostree kargs).
  - Anything else fails with a message naming what was found.
  - Arguments are split and compared the way the kernel does (C(lib/cmdline.c) C(next_arg), C(parameq)).
    Quotes group words, C(-) and C(_) are the same in names (C(kvm-intel.tdx) is C(kvm_intel.tdx)).
  - A C(present) argument makes its name single-valued, replacing a different value of the same name.
  - Arguments after a bare C(--) belong to init and are never touched.
  - GRUB's files are shell. The effective command line is determined by running C(/bin/sh) over them with
    the sourcing loop of C(grub-mkconfig), in a clean environment and with a time limit, never by imitating
    a shell. Every planned change is evaluated the same way before anything is written; a request the files
    would not honour (a later file replacing the variable, an argument produced by shell code) fails with
    a message naming the file, and nothing is written.
  - After writing, the configuration is read back (and re-evaluated for GRUB; entries re-read after
    C(grubby)); if it is not what was planned, the files are restored and the task fails.
  - On kernel-install hosts the layout, C($BOOT) and entry token are decided as the host's C(kernel-install)
    decides them (systemd's shell script up to 253, its C program from 254), from C(install.conf),
    C(/etc/machine-info), the entry token, C($BOOT/loader/entries.srel), the entry-token directory and the mounted
    ESP or XBOOTLDR partitions.
    Where the layout is C(bls), the running kernel's entry C($BOOT/loader/entries/<entry-token>-<release>.conf) is
    read after C(kernel-install add), because that command exits 0 whatever its plugins did; an entry that is
    missing or whose C(options) line lacks the planned arguments restores the files and fails the task, saying
    where it looked and why the layout is C(bls). Where it is C(other) or C(uki), C(kernel-install) writes no
    Type 1 entry by design, and the task succeeds with a warning saying why.
  - On BLS hosts the entries are written as the whole run leaves them (C(options) and the arguments joined by one
    space, added arguments last), then C(grubby) runs and finds them as it would write them; they are read back
    byte for byte afterwards. Check mode's diff is therefore the entries the real run leaves, whatever separators
    the entries had.
  - On ostree hosts, a deployment C(rpm-ostree kargs) made whose arguments cannot be read back is removed again
    with C(rpm-ostree cleanup --pending) when no deployment was pending before the task, and the task checks that
    none is pending any more.
  - Files are backed up before they change and written atomically through symbolic links (the link stays,
    its target changes; absolute targets are resolved inside O(host_root)). Bytes that are not UTF-8 are
    preserved. Commands run only when something changes and never in check mode. With a O(host_root) other
    than C(/) they run through C(chroot).
  - A BLS entry with more than one C(options) line is refused. systemd-boot joins them and GRUB's blscfg reads
    one, so the effective command line would depend on the loader.
extends_documentation_fragment:
  - confidential.tee.host_root
options:
  present:
    description:
      - Arguments that must be on the configured command line, as C(name) or C(name=value), in a list of strings.
      - A single string is refused rather than split on commas, because commas belong inside kernel
        arguments (C(iommu=pt,nomerge), C(console=ttyS0,115200n8)).
    type: raw
    default: []
  absent:
    description:
      - Arguments to remove, as a list of strings. C(name) removes every value of that name, C(name=value) only
        that value (compared as the kernel compares it, whatever the spelling on the line).
    type: raw
    default: []
  name:
    description:
      - Stem of the GRUB drop-in C(/etc/default/grub.d/<name>.cfg) that holds the arguments this task adds.
      - Use one name per role so that roles do not overwrite each other's arguments.
    type: str
    default: confidential-tee
  requests:
    description:
      - Several callers' requests (one per role) applied as one change, instead of O(present), O(absent) and
        O(name). Each keeps its own GRUB drop-in, so the files are exactly those that one task per request
        would write, but the boot configuration is regenerated (C(update-grub), C(kernel-install add), C(grubby))
        once, and the task writes all the files or none.
      - The requests are planned and validated together before anything is written. Requests that contradict
        each other (one wants an argument the other removes or sets to another value), an invalid argument in
        any request, or a name used twice fail the task with nothing written.
      - When the single update or the read-back fails, every file changed by the task is restored.
      - Mutually exclusive with O(present), O(absent) and O(name).
    type: list
    elements: dict
    suboptions:
      name:
        description: Stem of this request's GRUB drop-in, as O(name).
        type: str
        required: true
      present:
        description: Arguments this request wants on the command line, as O(present).
        type: raw
        default: []
      absent:
        description: Arguments this request wants removed, as O(absent).
        type: raw
        default: []
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

- name: Apply two roles' arguments with one boot update (each keeps its GRUB drop-in)
  confidential.tee.kernel_cmdline:
    requests:
      - name: 90-confidential-tee-tdx
        present: [kvm_intel.tdx=1, nohibernate]
      - name: 91-confidential-tee-iommu
        present: [intel_iommu=on]

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
configured_facts:
  description:
    - What the kernel will make of the configured arguments, as M(confidential.tee.tee_host_info) reports the
      running ones (C(host.cmdline) there), such as C(nohibernate), C(kvm_intel_tdx), C(iommu.passthrough) with the
      arguments that decide it, C(iommu_passthrough_remedy) and so on, plus C(verdict) (C(tdx.ready),
      C(tdx.reasons), C(snp.ready), C(snp.reasons), C(problems)). Roles decide from these facts.
  returned: always
  type: dict
  sample: {"nohibernate": true, "kvm_intel_tdx": true, "iommu_pt": false,
           "iommu": {"passthrough": null, "passthrough_args": []}}
running:
  description:
    - The arguments of the running kernel (C(/proc/cmdline)) whose names this task manages; null when that
      file is missing. The rest of the running line is not returned (it may carry credentials).
  returned: always
  type: list
  elements: str
  sample: [kvm_intel.tdx=0]
reboot_required:
  description: True when the running kernel does not yet have what was requested.
  returned: always
  type: bool
  sample: true
changes:
  description:
    - What changed, in the shape every module of this collection returns (docs/modules.md, result vocabulary).
    - C(written) and C(removed) (full paths, including O(host_root); in check mode what would be), C(hidden) (0
      here), C(commands) (the commands run, such as C(update-grub) or C(grubby), by description; in check mode
      those that would run), C(backups) (backup copies made, full paths) and C(entries) (each file with C(name),
      C(changed) and C(reasons)).
  returned: always
  type: dict
  sample: {"written": ["/etc/default/grub.d/90-tdx-host.cfg"], "removed": [], "hidden": 0,
           "commands": ["regenerate the GRUB configuration"], "backups": [],
           "entries": [{"name": "/etc/default/grub.d/90-tdx-host.cfg", "changed": true, "reasons": ["create"]}]}
actions:
  description:
    - Deprecated, removed in release 0.3.0; read RV(changes).
    - Actions taken, or in check mode the actions that would be taken.
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
  description:
    - Deprecated, removed in release 0.3.0; read C(changes.backups).
    - Backup copies made before files changed (full paths, including I(host_root)).
  returned: always
  type: list
  elements: str
  sample: [/etc/default/grub.2026-11-22@12:00:00~]
"""

import traceback

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.confidential.tee.plugins.module_utils.boot.kernel_cmdline import (
    SETUPS,
    CmdlineError,
    Executor,
    managed_running,
    parse_requests,
    plan,
    plan_requests,
    reboot_required,
    running_cmdline,
    verify,
)
from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import open_host
from ansible_collections.confidential.tee.plugins.module_utils.common.results import recorded_changes
from ansible_collections.confidential.tee.plugins.module_utils.common.validation import (
    display_text,
    list_of_strings_problem,
)
from ansible_collections.confidential.tee.plugins.module_utils.host.readiness import describe_cmdline


def _arguments_diff(result_plan):
    """The configured arguments before and after, one per line: the files' own diffs come from the recorder."""
    return {
        "before_header": f"kernel arguments ({result_plan.source})",
        "after_header": f"kernel arguments ({result_plan.source})",
        "before": "".join(f"{display_text(raw)}\n" for raw in result_plan.before),
        "after": "".join(f"{display_text(raw)}\n" for raw in result_plan.configured),
    }


def _changes(executor):
    """RV(changes) from the executor's change recorder, and the keys it replaces (deprecated until 0.3.0)."""
    return dict(changes=recorded_changes(executor.changes), actions=executor.done, backups=executor.backups)


def _plan(host, params):
    """One request (present, absent, name) or several (requests), planned as one change."""
    if params["requests"] is None:
        return plan(host, params["present"], params["absent"], params["name"], params["boot_setup"])
    return plan_requests(host, parse_requests(params["requests"]), params["boot_setup"])


def main():
    module = AnsibleModule(
        argument_spec=dict(
            host_root=dict(type="path", default="/"),
            present=dict(type="raw", default=[]),
            absent=dict(type="raw", default=[]),
            name=dict(type="str", default="confidential-tee"),
            requests=dict(
                type="list",
                elements="dict",
                options=dict(
                    name=dict(type="str", required=True),
                    present=dict(type="raw", default=[]),
                    absent=dict(type="raw", default=[]),
                ),
            ),
            boot_setup=dict(type="str", default="auto", choices=["auto", *SETUPS]),
            backup=dict(type="bool", default=True),
        ),
        mutually_exclusive=[("requests", "present"), ("requests", "absent"), ("requests", "name")],
        supports_check_mode=True,
    )
    params = module.params
    for option in ("present", "absent"):
        problem = list_of_strings_problem(option, params[option])
        if problem:
            module.fail_json(msg=problem)
    host = open_host(module)
    executor = Executor(host, module.check_mode, module.run_command, backup=params["backup"])
    redact = executor.changes.redact
    try:
        result_plan = _plan(host, params)
        present, absent = [arg.raw for arg in result_plan.present], [arg.raw for arg in result_plan.absent]
        executor.plan(result_plan)
        # The diff is the plan's, rendered before anything is applied and before verify() fills in the read-back.
        diff = [_arguments_diff(result_plan), *executor.changes.diff()] if module._diff else None
        executor.execute(result_plan)
        verify(result_plan, executor)
        running = running_cmdline(host)
        needs_reboot = reboot_required(running, present, absent)
    except CmdlineError as exc:
        module.fail_json(msg=redact(display_text(str(exc))), **redact(_changes(executor)))
    except Exception as exc:  # whatever failed after a change, the host is put back first
        executor.rollback()
        module.fail_json(
            msg=redact(display_text(f"kernel_cmdline could not complete: {exc}{executor.restored()}")),
            exception=redact(traceback.format_exc()),
            **redact(_changes(executor)),
        )

    result = dict(
        changed=result_plan.changed,
        setup=result_plan.setup,
        source=result_plan.source,
        configured=[display_text(raw) for raw in result_plan.configured],
        configured_facts=describe_cmdline(display_text(" ".join(result_plan.configured)), result_plan.source),
        running=managed_running(running, present, absent),
        reboot_required=needs_reboot,
        **_changes(executor),
    )
    if diff is not None:
        result["diff"] = diff
    for warning in result_plan.warnings:
        module.warn(redact(display_text(warning)))
    module.exit_json(**redact(result))


if __name__ == "__main__":
    main()
