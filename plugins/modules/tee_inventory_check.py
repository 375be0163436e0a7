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
known:
  description: How many variable names the collection knows.
  returned: always
  type: int
  sample: 310
"""

from ansible.module_utils.basic import AnsibleModule


def main() -> None:
    module = AnsibleModule(argument_spec={"strict": {"type": "bool", "default": False}}, supports_check_mode=True)
    module.fail_json(msg="confidential.tee.tee_inventory_check runs on the controller through its action plugin only")


if __name__ == "__main__":
    main()
