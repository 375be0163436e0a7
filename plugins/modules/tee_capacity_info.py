#!/usr/bin/python
# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: tee_capacity_info
short_description: Read TEE key capacity and usage from the kernel's misc cgroup
version_added: 0.1.0
description:
  - Reads C(misc.capacity), C(misc.current) and C(misc.peak) of the misc cgroup controller, exactly as the
    kernel writes them, and reports per resource (C(tdx), C(sev), C(sev_es)) the capacity, the usage with
    its source, the free keys and the peak.
  - SEV-ES and SEV-SNP guests both consume C(sev_es); there is no C(snp) resource in the kernel.
  - On kernels without a root C(misc.current) the usage is the sum of the top-level child cgroups, a lower
    bound, and each entry of RV(resources) says so with C(current_source=children_sum).
  - A host without the misc controller is a fact (RV(misc_controller.present=false)), not an error.
  - Finds the controller on cgroup v2 (C(/sys/fs/cgroup)) and on cgroup v1 (C(/sys/fs/cgroup/misc)).
author:
  - confidential.tee maintainers (@confidential-tee)
extends_documentation_fragment:
  - confidential.tee.host_root
  - confidential.tee.read_only
options:
  resources:
    description:
      - Misc resources to report. C(snp) is accepted and reported under C(sev_es).
      - Resources the kernel reports but this list omits are still reported in RV(unknown_resources) when
        the kernel knows names this module does not.
    type: list
    elements: str
    choices: [tdx, sev, sev_es, snp]
    default: [sev, sev_es, tdx]
  cgroups:
    description:
      - Also report every child cgroup that has misc files, with its C(misc.current), C(misc.max),
        C(misc.peak), C(misc.events) and C(misc.events.local).
    type: bool
    default: false
  cgroup_depth:
    description:
      - How many levels below the controller root to walk when O(cgroups=true).
    type: int
    default: 3
notes:
  - Kernel reference for the file formats is C(kernel/cgroup/misc.c); TDX capacity is the number of TDX
    KeyIDs minus the one global KeyID of the TDX module.
seealso:
  - module: confidential.tee.tee_capacity_check
  - module: confidential.tee.tee_host_info
"""

EXAMPLES = r"""
- name: Read TEE key capacity
  confidential.tee.tee_capacity_info:
  register: tee

- name: Show free TDX keys
  ansible.builtin.debug:
    msg: "{{ tee.resources.tdx.free }} of {{ tee.resources.tdx.capacity }} TDX keys free"

- name: Read a node's root mounted in a DaemonSet, with per-cgroup limits
  confidential.tee.tee_capacity_info:
    host_root: /host
    cgroups: true
    resources: [sev_es]
"""

RETURN = r"""
host_root:
  description:
    - The host root the files were read under. M(confidential.tee.tee_capacity_check) given this result as
      O(confidential.tee.tee_capacity_check#module:capacity) reads anything more it needs from the same root.
  returned: always
  type: str
  sample: /host
misc_controller:
  description: Where the misc controller was found, or why it was not.
  returned: always
  type: dict
  contains:
    present:
      description: Whether the misc controller's root files exist.
      type: bool
      sample: true
    cgroup_version:
      description: C(2) for the unified hierarchy, C(1) for a v1 mount, null when absent.
      type: int
      sample: 2
    path:
      description: Directory holding C(misc.capacity).
      type: str
      sample: /sys/fs/cgroup
    reason:
      description: Why the controller is absent; null when present.
      type: str
      sample: null
    not_root_cgroup:
      description:
        - True when O(host_root) shows a container's own cgroup (its own cgroup namespace, or the runtime's bind
          mount of its cgroup) instead of the host's root, where alone C(misc.capacity) exists
          (C(kernel/cgroup/misc.c)); C(reason) then says how to read the host's (C(host_root=/host) with the
          host's C(/) mounted, or C(hostPID) and C(host_root=/proc/1/root)).
      type: bool
      sample: false
resources:
  description:
    - Per requested resource (kernel names), its capacity and usage. A resource the kernel omits (capacity 0)
      is reported with C(capacity=0).
  returned: always
  type: dict
  sample:
    tdx:
      name: tdx
      known: true
      capacity: 63
      current: 5
      current_source: root
      current_is_lower_bound: false
      free: 58
      free_is_upper_bound: false
      peak: 9
      utilization: 7.94
      consumers: [TDX guests (TDs)]
  contains:
    capacity:
      description: Keys the kernel can hand out; null when the file could not be parsed.
      type: int
    current:
      description: Keys in use; null when unknown.
      type: int
    current_source:
      description: C(root) (root misc.current), C(children_sum) (old kernel, lower bound) or C(unavailable).
      type: str
    current_is_lower_bound:
      description: True when usage was summed from child cgroups.
      type: bool
    free:
      description: Capacity minus usage, never negative; null when either is unknown.
      type: int
    free_is_upper_bound:
      description: True when C(free) may overstate the free keys (usage is a lower bound).
      type: bool
    peak:
      description: High-water mark from C(misc.peak); null on kernels without it.
      type: int
    utilization:
      description: Usage as a percentage of capacity; null when capacity is 0 or usage unknown.
      type: float
    consumers:
      description: Which guest types charge this resource.
      type: list
      elements: str
unknown_resources:
  description: Resources the kernel reports that this module does not know, with their values as read.
  returned: always
  type: dict
  sample: {}
resource_aliases:
  description: User spellings mapped to kernel resource names.
  returned: always
  type: dict
  sample: {snp: sev_es}
cgroups:
  description: Child cgroups with misc files, when O(cgroups=true).
  returned: when O(cgroups=true)
  type: list
  elements: dict
  sample:
    - path: machine.slice
      current: {tdx: 2}
      max: {tdx: max}
      peak: {tdx: 3}
      events: {tdx: 0}
      events_local: {tdx: 0}
problems:
  description:
    - Every malformed line or unreadable file, with C(path), C(problem), C(line_number) and C(line); the one name of
      a problem list in this collection (docs/modules.md, result vocabulary).
  returned: always
  type: list
  elements: dict
  sample: []
issues:
  description: Deprecated, removed in release 0.3.0; read RV(problems), the same list.
  returned: always
  type: list
  elements: dict
  sample: []
notes:
  description: Facts worth knowing about how the numbers were obtained.
  returned: always
  type: list
  elements: str
  sample: []
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import open_host
from ansible_collections.confidential.tee.plugins.module_utils.host.capacity_facts import capacity_facts
from ansible_collections.confidential.tee.plugins.module_utils.host.misc_cgroup import KNOWN_RESOURCES


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "host_root": {"type": "path", "default": "/"},
            "resources": {
                "type": "list",
                "elements": "str",
                "choices": [*KNOWN_RESOURCES, "snp"],
                "default": list(KNOWN_RESOURCES),
            },
            "cgroups": {"type": "bool", "default": False},
            "cgroup_depth": {"type": "int", "default": 3},
        },
        supports_check_mode=True,
    )
    params = module.params
    if params["cgroup_depth"] < 1:
        module.fail_json(msg=f"cgroup_depth must be at least 1, got {params['cgroup_depth']}")
    result = capacity_facts(open_host(module), params["resources"], params["cgroups"], params["cgroup_depth"])
    result["changed"] = False
    for issue in result["problems"]:
        module.warn(
            f"{issue['path']}{':' + str(issue['line_number']) if issue['line_number'] else ''}: {issue['problem']}"
        )
    module.exit_json(**result)


if __name__ == "__main__":
    main()
