#!/usr/bin/python
# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: tee_capacity_check
short_description: Fail a play when a host's TEE key capacity or headroom is not what the workload needs
version_added: 0.1.0
description:
  - Validates one misc cgroup resource (C(tdx), C(sev), C(sev_es); C(snp) means C(sev_es)) against the
    requirements given, and fails with a message that says what is wrong, where, why, and how to fix it.
  - Every requested check is evaluated and returned in RV(checks), passing or not.
  - Given O(capacity), the registered result of M(confidential.tee.tee_capacity_info), it validates that result
    instead of reading the host again, so both tasks see the same files and the same moment; what else it needs
    (the SNP range of AMD ciphertext hiding) it reads under that result's C(host_root).
author:
  - confidential.tee maintainers (@confidential-tee)
extends_documentation_fragment:
  - confidential.tee.host_root
  - confidential.tee.read_only
options:
  capacity:
    description:
      - The registered result of M(confidential.tee.tee_capacity_info) to validate. The result's C(host_root)
        replaces O(host_root); a different O(host_root) other than C(/) (also from C(module_defaults)) is refused.
    type: dict
  resource:
    description:
      - The misc resource to validate. C(snp) is validated as C(sev_es), which SEV-SNP guests charge.
      - With AMD ciphertext hiding (C(kvm_amd.ciphertext_hiding_asids=N), Linux 6.18+) C(snp) is bounded by the
        SNP range 1..N, since C(misc.capacity) and C(misc.current) count SEV-ES and SNP guests together; the
        capacity checked is at most N and the free keys at most the smaller of the joint free count and N.
    type: str
    required: true
    choices: [tdx, sev, sev_es, snp]
  min_capacity:
    description:
      - Least capacity the host must report. The default fails on a host where the resource is not
        initialised at all (capacity 0).
    type: int
    default: 1
  min_free:
    description:
      - Least number of free keys (capacity minus C(misc.current)).
    type: int
  max_utilization:
    description:
      - Highest acceptable usage, in percent of capacity (0 to 100).
    type: float
  expected_capacity:
    description:
      - Exact capacity the host must report, for example the value recorded when the BIOS key split was set.
    type: int
notes:
  - On kernels without a root C(misc.current) usage is a lower bound; the messages say so.
seealso:
  - module: confidential.tee.tee_capacity_info
"""

EXAMPLES = r"""
- name: Read capacity from a node root mounted at /host (a DaemonSet)
  confidential.tee.tee_capacity_info:
    host_root: /host
  register: tee

- name: Validate what was read, without reading again
  confidential.tee.tee_capacity_check:
    capacity: "{{ tee }}"
    resource: tdx
    min_free: 4

- name: Refuse to schedule TDs on a host without TDX keys
  confidential.tee.tee_capacity_check:
    resource: tdx

# example: skip: an AMD SEV-SNP host; the simulated node of the example run is a TDX node
- name: Keep headroom for four more SNP guests
  confidential.tee.tee_capacity_check:
    resource: snp
    min_free: 4
    max_utilization: 90

- name: Detect a changed BIOS key split on a node root mounted at /host
  confidential.tee.tee_capacity_check:
    host_root: /host
    resource: tdx
    expected_capacity: 63
"""

RETURN = r"""
resource:
  description: The kernel resource name validated.
  returned: always
  type: str
  sample: tdx
capacity:
  description: Capacity read from C(misc.capacity); null when it could not be read.
  returned: always
  type: int
  sample: 63
current:
  description: Usage read from C(misc.current); null when unknown.
  returned: always
  type: int
  sample: 5
free:
  description: Free keys; null when unknown.
  returned: always
  type: int
  sample: 58
current_is_lower_bound:
  description: True on kernels without a root C(misc.current), where usage is summed from children.
  returned: always
  type: bool
  sample: false
snp_asids:
  description:
    - With O(resource=snp) on a host with AMD ciphertext hiding, the SNP range N (SNP ASIDs 1..N); then
      RV(capacity) is at most N and RV(free) an upper bound. Null otherwise.
  returned: always
  type: int
  sample: null
checks:
  description:
    - Every check evaluated, as every module of this collection returns a check (docs/modules.md, result
      vocabulary) - C(name), C(status) (C(PASS) or C(FAIL)), C(ok), C(message) and C(fix) (null here).
  returned: always
  type: list
  elements: dict
  sample:
    - name: min_capacity
      status: PASS
      ok: true
      message: tdx capacity 63 >= 1
      fix: null
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.confidential.tee.plugins.module_utils.common.errors import refused_option
from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import open_host
from ansible_collections.confidential.tee.plugins.module_utils.common.tee import MISC_REPORT_ORDER
from ansible_collections.confidential.tee.plugins.module_utils.host.capacity_check import evaluate
from ansible_collections.confidential.tee.plugins.module_utils.host.capacity_facts import state_from_facts
from ansible_collections.confidential.tee.plugins.module_utils.host.misc_cgroup import read_misc_state
from ansible_collections.confidential.tee.plugins.module_utils.host.sev_asids import read_ciphertext_hiding


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "host_root": {"type": "path", "default": "/"},
            "capacity": {"type": "dict"},
            # The vocabulary's misc resources in report order, and snp (SEV-SNP guests charge sev_es).
            "resource": {"type": "str", "required": True, "choices": [*MISC_REPORT_ORDER, "snp"]},
            "min_capacity": {"type": "int", "default": 1},
            "min_free": {"type": "int"},
            "max_utilization": {"type": "float"},
            "expected_capacity": {"type": "int"},
        },
        supports_check_mode=True,
    )
    params = module.params
    state = None
    if params["capacity"] is not None:
        try:
            state = state_from_facts(params["capacity"])
        except ValueError as error:
            module.fail_json(msg=f"capacity {error}: register the result of confidential.tee.tee_capacity_info")
        read_at = state.layout.host_root
        if params["host_root"] not in ("/", read_at):
            module.fail_json(
                msg=f"host_root {params['host_root']} but the capacity given was read under {read_at}: "
                "give one of them, or register tee_capacity_info with the same host_root"
            )
        params["host_root"] = read_at
    for name in ("min_capacity", "min_free", "expected_capacity"):
        if params[name] is not None and params[name] < 0:
            module.fail_json(msg=f"{name} must be 0 or more, got {params[name]}", **refused_option(name))
    utilization = params["max_utilization"]
    if utilization is not None and not 0 <= utilization <= 100:
        module.fail_json(
            msg=f"max_utilization is a percentage between 0 and 100, got {utilization}",
            **refused_option("max_utilization"),
        )

    reader = open_host(module)
    snp_asids = None
    if params["resource"] == "snp":
        # SNP asked for: AMD ciphertext hiding may give SNP only part of the sev_es ASIDs (sev_asids.py).
        hiding = read_ciphertext_hiding(reader, reader.isdir("sys/module/kvm_amd"))
        for problem in reader.problems:
            module.warn("%s: %s" % (problem.path, problem.problem))
        snp_asids = hiding["asids"] or None
    report = evaluate(
        state if state is not None else read_misc_state(reader),
        params["resource"],
        snp_asids=snp_asids,
        min_capacity=params["min_capacity"],
        min_free=params["min_free"],
        max_utilization=utilization,
        expected_capacity=params["expected_capacity"],
    )
    result = {
        "changed": False,
        "resource": report.resource,
        "capacity": report.capacity,
        "current": report.current,
        "free": report.free,
        "current_is_lower_bound": report.current_is_lower_bound,
        "snp_asids": report.snp_asids,
        "checks": [check.as_dict() for check in report.checks],
    }
    if not report.ok:
        module.fail_json(msg=" | ".join(check.message for check in report.failures), **result)
    module.exit_json(msg=f"{report.resource}: all {len(report.checks)} checks passed", **result)


if __name__ == "__main__":
    main()
