# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
name: host_role_request
version_added: 0.2.0
author:
  - confidential.tee maintainers (@confidential-tee)
short_description: What a host role asks of the next boot and of the module loader, without entering the role
description:
  - >-
    Checks the inputs of one of the host roles (C(tdx_host), C(snp_host), C(iommu_passthrough), C(vsock)) and
    returns its plan: the kernel arguments it wants as one C(requests) entry of M(confidential.tee.kernel_cmdline)
    and the modules-load file it wants as one C(requests) entry of M(confidential.tee.kernel_modules).
  - >-
    The role's variables are read as the role itself reads them: what the inventory, the play or the task sets,
    over the role's own C(defaults/main.yml). So a playbook can apply every role's request with one boot update
    before it enters any role (C(playbooks/tee_node.yml) does), and the role, entered once, plans the same; each
    role's C(tasks/request.yml) uses this lookup too. The rules live in C(module_utils/boot/host_roles.py).
  - >-
    C(snp_host) on a host needs the configured command line: its first plan names the read (C(configured_read):
    C(name), C(boot_setup)) to make with M(confidential.tee.kernel_cmdline) in check mode; pass that result as
    O(configured) to get the request. C(iommu_passthrough) with C(iommu_passthrough_cpu_vendor=auto) needs
    O(host_info).
options:
  _terms:
    description: The host roles to plan, by short name.
    type: list
    elements: str
    required: true
  host_root:
    description: The root of the host's filesystem (C(confidential.tee.host_root)); modules load now only under C(/).
    type: str
    default: /
  host_info:
    description: The C(host) of a M(confidential.tee.tee_host_info) read, for the CPU vendor; C(none) when not read.
    type: dict
  configured:
    description: The check-mode M(confidential.tee.kernel_cmdline) read that C(configured_read) asks for (C(snp_host)).
    type: dict
"""

EXAMPLES = r"""
- name: Check the vsock inputs and decide its modules-load request
  ansible.builtin.set_fact:
    vsock_plan: "{{ lookup('confidential.tee.host_role_request', 'vsock', host_root='/') }}"

- name: Plan several roles at once (one plan per role, in order)
  ansible.builtin.set_fact:
    plans: "{{ query('confidential.tee.host_role_request', 'tdx_host', 'iommu_passthrough', 'vsock') }}"
"""

RETURN = r"""
_raw:
  description: One plan per role named.
  type: list
  elements: dict
  contains:
    problems:
      description: Why the inputs are refused, one message each; empty when they are good.
      type: list
      elements: str
    cmdline:
      description: >-
        The kernel arguments, one C(requests) entry of kernel_cmdline (C(name), C(present), C(absent)), or null.
      type: dict
    modules:
      description: The modules-load file as one C(requests) entry of kernel_modules, or null (set with C(host) output).
      type: dict
"""

from collections.abc import Mapping
from pathlib import Path

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase
from ansible_collections.confidential.tee.plugins.module_utils.boot import host_roles

# The collection root: plugins/lookup/<this file> lies two folders below it, beside roles/.
COLLECTION = Path(__file__).parents[2]


class _RoleValues(Mapping):
    """A role's variables as the role sees them: the task's variables over the role's defaults, templated on read."""

    def __init__(self, templar, scope: dict):
        self._templar, self._scope = templar, scope

    def __getitem__(self, name):
        return self._templar.template(self._scope[name])

    def __iter__(self):
        return iter(self._scope)

    def __len__(self):
        return len(self._scope)


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        variables = variables or {}
        plans = []
        for role in terms:
            if role not in host_roles.PLANNERS:
                raise AnsibleLookupError(
                    f"confidential.tee.host_role_request plans the roles {', '.join(host_roles.PLANNERS)}, not {role!r}"
                )
            defaults = self._loader.load_from_file(
                str(COLLECTION / "roles" / role / "defaults/main.yml"), trusted_as_template=True
            )
            specs = self._loader.load_from_file(str(COLLECTION / "roles" / role / "meta/argument_specs.yml"))
            scope = {**(defaults or {}), **variables}
            values = _RoleValues(self._templar.copy_with_new_env(available_variables=scope), scope)
            context = {
                "options": specs["argument_specs"]["main"]["options"],
                "raw_defaults": defaults,
                "host_root": self.get_option("host_root"),
                "host_info": self.get_option("host_info"),
                "configured": self.get_option("configured"),
                "facts": self._templar.template(variables.get("ansible_facts", {})),
                "host": variables.get("inventory_hostname"),
            }
            plans.append(host_roles.plan(role, values, context))
        return plans
