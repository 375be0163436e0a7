#!/usr/bin/python
# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: tee_key_pools
short_description: Decide which resource advertises each node's TEE keys, refusing any plan with two pools
version_added: 0.1.0
description:
  - Takes the per-node choices (CPU vendor, which consumers run on the node, the key-accounting mode) and
    returns the plan every cluster role of this collection renders from, so that exactly one extended
    resource counts a node's hardware keys.
  - Two advertisers exist upstream. NFD publishes C(tdx.intel.com/keys) or C(sev-snp.amd.com/esids) for Kata's
    RuntimeClass overhead; KubeVirt's virt-handler publishes C(devices.kubevirt.io/tdx) (sized from the misc
    cgroup) or C(devices.kubevirt.io/sev) (sized by C(--max-devices), not by keys). A node where both would
    count the same keys is refused with a message naming both objects and how to fix it.
  - "Modes per node. C(kubevirt) (TDX only when Kata runs there): KubeVirt's device plugin is the pool and
    Kata's overhead requests its resource; NFD publishes labels only. C(nfd): NFD's extended resource is the
    pool and virt-handler is kept off the node. C(auto): C(kubevirt) where KubeVirt runs (and can share),
    else C(nfd)."
  - Pure computation; it changes nothing and runs wherever it is called (usually the controller).
author:
  - confidential.tee maintainers (@confidential-tee)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - confidential.tee.computes_only
options:
  nodes:
    description:
      - One entry per Kubernetes node.
      - The same list feeds every cluster role, so it also carries the node's C(qgs) fact.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description: The Kubernetes node name.
        type: str
        required: true
      vendor:
        description: CPU vendor; C(intel) means TDX keys (C(tdx)), C(amd) SEV-SNP keys (C(sev_es)).
        type: str
        required: true
        choices: [intel, amd]
      consumers:
        description: What runs confidential guests on the node.
        type: list
        elements: str
        choices: [kata, kubevirt]
        default: []
      mode:
        description:
          - Which advertiser holds the node's pool (the modes of docs/key-pools.md).
          - The choices are the key-pool policy's modes (module_utils/common/pool_policy.py); a test keeps them equal.
          - C(kernel) is one pool under NFD's (Kata's) resource name that the node agent C(tee-key-agent) writes into
            the Node's status at the keys the kernel has free for Kubernetes; KubeVirt VMIs request it through a
            MutatingAdmissionPolicy (RV(kernel)). C(auto) never chooses it.
        type: str
        choices: [auto, kernel, kubevirt, nfd]
        default: auto
      qgs:
        description:
          - The node's C(host.qgs) fact from M(confidential.tee.tee_host_info) (C(path), C(present), C(is_socket)).
          - Not used for the key plan; the KubeVirt role decides TDX attestation from it.
        type: dict
      sev_asids:
        description:
          - The node's C(host.sev_asids) fact from M(confidential.tee.tee_host_info) (AMD nodes).
          - With AMD ciphertext hiding (C(kvm_amd.ciphertext_hiding_asids=N), Linux 6.18+) SNP guests get ASIDs
            1..N only, while NFD's C(@cpu.security.sev.encrypted_state_ids) copies the joint C(sev_es) count. An
            NFD pool on such a node is then published as the fixed number N (RV(nfd) C(static_values)), and a
            KubeVirt pool gets a warning. Ciphertext hiding with an unknown SNP count is refused.
        type: dict
  rule_name:
    description: Name of the NodeFeatureRule the NFD role writes, used in messages.
    type: str
    default: confidential-tee-keys
  openshift:
    description: Also check the OpenShift constraint that the single C(kata-cc) RuntimeClass serves one TEE type.
    type: bool
    default: false
seealso:
  - module: confidential.tee.tee_host_info
"""

EXAMPLES = r"""
- name: Plan one key pool per node
  confidential.tee.tee_key_pools:
    nodes:
      - {name: tdx-1, vendor: intel, consumers: [kata, kubevirt], mode: kubevirt}
      - {name: snp-1, vendor: amd, consumers: [kata]}
  register: pools

- name: Show the plan, one line per distinct decision
  ansible.builtin.debug:
    msg: "{{ pools.overview }}"
"""

RETURN = r"""
plan:
  description:
    - The key-pool plan, returned once (docs/modules.md, result vocabulary); C(warnings) lists what is worth
      knowing but does not stop the plan (also emitted as module warnings).
  returned: always
  type: dict
  contains:
    nodes:
      description: Per node name, the resolved plan.
      returned: always
      type: dict
      sample:
        tdx-1:
          name: tdx-1
          vendor: intel
          tee: tdx
          misc_resource: tdx
          consumers: [kata, kubevirt]
          mode: kubevirt
          pool: {resource: devices.kubevirt.io/tdx, advertiser: kubevirt, counts_keys: true}
          virt_handler: true
          nfd_extended_resource: false
    kata:
      description: Per TEE (C(tdx), C(snp)) with Kata nodes, the one resource its RuntimeClasses request and the nodes.
      returned: always
      type: dict
      sample: {tdx: {resource: devices.kubevirt.io/tdx, nodes: [tdx-1]}}
    nfd:
      description:
        - Per TEE present, the NFD rule name, label, matched feature, resource and the nodes it advertises on.
        - C(static_values) maps node names to the fixed count published instead of the feature (the SNP range of
          AMD ciphertext hiding).
      returned: always
      type: dict
    kubevirt:
      description:
        - C(feature_gates) KubeVirt needs, C(nodes) where virt-handler is the pool, C(tdx_nodes) among them, and
          C(excluded_nodes) where virt-handler must not run.
      returned: always
      type: dict
    kernel:
      description:
        - Per TEE with nodes in C(kernel) mode, the pool C(resource), the C(nodes) the agent runs on, and
          C(kubevirt_resource) (the KubeVirt resource the admission policy keys on) where such a node runs VMIs.
      returned: always
      type: dict
      sample: {tdx: {resource: tdx.intel.com/keys, nodes: [tdx-1], kubevirt_resource: devices.kubevirt.io/tdx}}
    summary:
      description: One line per node saying which resource is its pool and who charges it.
      returned: always
      type: list
      elements: str
    overview:
      description:
        - The plan for a person to read, one line per distinct decision in the order of its first node, naming the
          first five of its nodes and counting the rest (a 5,000-node plan is a few lines, where RV(plan.summary)
          has 5,000).
      returned: always
      type: list
      elements: str
      sample:
        - "tdx-1, tdx-3 (2 nodes, TDX): one pool devices.kubevirt.io/tdx advertised by KubeVirt's virt-handler device
          plugin, charged by kata and kubevirt"
    warnings:
      description: Advice about the plan (such as VMIs whose keys no pool counts); also emitted as module warnings.
      returned: always
      type: list
      elements: str
nodes:
  description: Deprecated, removed in release 0.3.0; read RV(plan.nodes), the same value.
  returned: always
  type: dict
kata:
  description: Deprecated, removed in release 0.3.0; read RV(plan.kata), the same value.
  returned: always
  type: dict
nfd:
  description: Deprecated, removed in release 0.3.0; read RV(plan.nfd), the same value.
  returned: always
  type: dict
kubevirt:
  description: Deprecated, removed in release 0.3.0; read RV(plan.kubevirt), the same value.
  returned: always
  type: dict
kernel:
  description: Deprecated, removed in release 0.3.0; read RV(plan.kernel), the same value.
  returned: always
  type: dict
summary:
  description: Deprecated, removed in release 0.3.0; read RV(plan.summary), the same value.
  returned: always
  type: list
  elements: str
overview:
  description: Deprecated, removed in release 0.3.0; read RV(plan.overview), the same value.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.confidential.tee.plugins.module_utils.cluster.key_pools import KeyPoolError, plan
from ansible_collections.confidential.tee.plugins.module_utils.common import pool_policy, tee_registry


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "nodes": {
                "type": "list",
                "elements": "dict",
                "required": True,
                "options": {
                    "name": {"type": "str", "required": True},
                    "vendor": {"type": "str", "required": True, "choices": list(tee_registry.VENDORS)},
                    "consumers": {"type": "list", "elements": "str", "default": [], "choices": ["kata", "kubevirt"]},
                    "mode": {"type": "str", "default": "auto", "choices": list(pool_policy.mode_names())},
                    "qgs": {"type": "dict"},
                    "sev_asids": {"type": "dict"},
                },
            },
            "rule_name": {"type": "str", "default": "confidential-tee-keys"},
            "openshift": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    try:
        result = plan(module.params["nodes"], module.params["rule_name"], module.params["openshift"])
    except KeyPoolError as exc:
        module.fail_json(msg=str(exc))
    for warning in result["warnings"]:
        module.warn(warning)
    # The plan once, in RV(plan). Its keys at the top level are deprecated copies until release 0.3.0 (Ansible
    # reserves the key "warnings" for module.warn(), so the plan's own list was never among them).
    module.exit_json(changed=False, plan=result, **{k: v for k, v in result.items() if k != "warnings"})


if __name__ == "__main__":
    main()
