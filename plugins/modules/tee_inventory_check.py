#!/usr/bin/python
# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: tee_inventory_check
short_description: Report inventory variables with this collection's prefixes that nothing reads, with "did you mean"
version_added: 0.1.0
description:
  - Looks at every host's variables (inventory, group and host vars, extra vars) and reports each one that starts
    with C(tee_) or with the name of one of this collection's roles (C(tdx_host_), C(kubevirt_cc_), ...) but that
    no role or playbook of the collection reads, naming the hosts that set it and the closest known name, for
    example C(tee_node_consumer) (did you mean C(tee_node_consumers)?).
  - The known names have one home, the roles' C(meta/argument_specs.yml) and C(defaults/main.yml), with the
    playbooks' own variables in the entry point C(playbook_variables) of the internal role
    C(confidential.tee.role_inputs) (C(ansible-doc -t role confidential.tee.role_inputs)); the facts the
    collection sets are known too.
  - Every playbook of the collection runs it first. Unknown names are warnings unless O(strict).
  - Runs on the controller only (an action plugin); the hosts are not contacted.
author:
  - confidential.tee maintainers (@confidential-tee)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - confidential.tee.computes_only
options:
  strict:
    description:
      - Fail the task when any unknown variable is found, instead of warning. The playbooks pass
        C(tee_strict_variables).
    type: bool
    default: false
  cluster:
    description:
      - Also read the cluster playbook's node group in the same pass (each read of a host's variables is
        ansible-core's whole variable merge for it, about 0.3 ms, so 5,000 hosts cost seconds a pass), and return
        RV(cluster). C(playbooks/cluster.yml) sets it; other callers leave it out.
    type: dict
    suboptions:
      hosts:
        description: The inventory hosts of the node group.
        type: list
        elements: str
        default: []
      variables:
        description: The cluster-wide variables to check (C(__confidential_tee_unset__) for one that is not set).
        type: dict
        default: {}
      openshift:
        description: Plan for OpenShift (C(tee_cluster_flavor) C(openshift)).
        type: bool
        default: false
      host_facts:
        description: The nodes' host facts are read later, so no plan is made now (C(tee_cluster_gather_host_facts)).
        type: raw
        default: false
notes:
  - Private variables (C(__...)) are never reported.
"""

EXAMPLES = r"""
- name: Warn about typos in the inventory before a play of your own
  confidential.tee.tee_inventory_check:

- name: Refuse them
  confidential.tee.tee_inventory_check:
    strict: true
"""

RETURN = r"""
unknown:
  description: One entry per unknown variable.
  returned: always
  type: list
  elements: dict
  sample:
    - name: tee_node_consumer
      hosts: [tdx-1]
      did_you_mean: tee_node_consumers
cluster:
  description:
    - What the cluster playbook needs of the node group, as the filter
      R(confidential.tee.cluster_inventory,ansible_collections.confidential.tee.cluster_inventory_filter) returns it.
  returned: when O(cluster) is given
  type: dict
  contains:
    errors:
      description: Every problem of the cluster-wide and per-node variables, each naming the variable and the node.
      type: list
      elements: str
    gpu_hosts:
      description: The hosts with C(tee_node_gpu) true.
      type: list
      elements: str
    unknown_vendor:
      description: The nodes whose CPU vendor is neither C(intel) nor C(amd).
      type: list
      elements: str
    qgs_nodes:
      description: C(name) and C(qgs) of the nodes with a C(qgs) fact.
      type: list
      elements: dict
    plan:
      description: The key-pool plan without its per-node map (C(refused) when it gives keys two pools); C(none) with
        problems or with O(cluster.host_facts).
      type: dict
known:
  description: How many variable names the collection knows.
  returned: always
  type: int
  sample: 310
"""

from ansible.module_utils.basic import AnsibleModule


def main() -> None:
    cluster = {
        "hosts": {"type": "list", "elements": "str", "default": []},
        "variables": {"type": "dict", "default": {}},
        "openshift": {"type": "bool", "default": False},
        "host_facts": {"type": "raw", "default": False},
    }
    module = AnsibleModule(
        argument_spec={"strict": {"type": "bool", "default": False}, "cluster": {"type": "dict", "options": cluster}},
        supports_check_mode=True,
    )
    module.fail_json(msg="confidential.tee.tee_inventory_check runs on the controller through its action plugin only")


if __name__ == "__main__":
    main()
