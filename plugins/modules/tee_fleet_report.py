#!/usr/bin/python
# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: tee_fleet_report
short_description: Write the fleet's TEE readiness and key drift report (HTML, Markdown, JSON, Prometheus)
version_added: 0.1.0
author:
  - confidential.tee contributors (@confidential-tee)
description:
  - Takes the registered M(confidential.tee.tee_host_info) results
    (with O(confidential.tee.tee_host_info#module:preflight=true)) of every host and the Kubernetes objects
    of the cluster (Nodes, Pods, RuntimeClasses, NFD NodeFeatureRules),
    finds where the scheduler's view of TEE keys disagrees with the kernel's (double pools, keys used outside
    Kubernetes, stale advertisers, NFD's C(sev) prefix quirk, RuntimeClass overhead on a resource nothing
    advertises, SEV-ES guests no resource counts), and writes one report.
  - The report is a self-contained HTML page (per-node verdict table, key pools per node as small charts,
    findings with fixes), the same as Markdown for tickets, the whole data as JSON, and node_exporter
    textfile-collector metrics (C(.prom)) with capacity, usage, peak, free and C(misc.events) per resource, advertised
    and requested keys, keys used outside Kubernetes, findings and readiness.
  - Runs where the report is written (usually C(localhost)); it reads no host files itself. There, on the local
    connection without become, its action plugin builds and writes the report inside Ansible's worker (no module
    round trip); on another host, or with become, the module runs on that host. Results, check mode and diff are
    the same either way.
  - Every file is written atomically (a temporary file in the same directory, then renamed), through a symbolic
    link if the destination is one, and only when its content changes.
attributes:
  check_mode:
    support: full
    details: Reports which files would change; writes nothing.
  diff_mode:
    support: partial
    details: Shows the Markdown report and the fleet metrics file before and after; the HTML and JSON are not diffed.
  platform:
    platforms: posix
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
options:
  dest:
    description:
      - Directory to write the report into; created (mode 0755) when missing.
      - Files C(report.html), C(report.md), C(report.json), C(tee-fleet.prom) and, with O(prometheus_per_node=true),
        C(textfile/<node>.prom) per node.
    type: path
    required: true
  hosts:
    description:
      - One entry per host.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description: The host's name (inventory hostname).
        type: str
        required: true
      node:
        description: Its Kubernetes node name; defaults to O(hosts[].name).
        type: str
      result:
        description:
          - The registered result of M(confidential.tee.tee_host_info) with C(preflight=true) for the host, as a dict
            or as JSON text (what the P(confidential.tee.fleet_hosts#filter) filter gives, cheaper to pass).
          - Missing, failed or unreachable results make the node C(UNKNOWN) in the report, with the reason.
        type: raw
  kubernetes:
    description:
      - The cluster's objects, as C(kubernetes.core.k8s_info) returns them in C(resources) or as C(kubectl get -o json)
        List documents. Keys C(nodes), C(pods), C(runtime_classes), C(node_feature_rules); missing keys are empty.
      - Mutually exclusive with O(kubernetes_dir). Without either, drift is not checked and the report says so.
    type: dict
  kubernetes_dir:
    description:
      - A directory with C(nodes.json), C(pods.json), C(runtimeclasses.json) and C(nodefeaturerules.json)
        (C(kubectl get <kind> -A -o json) output), for offline use. A missing file counts as no objects of that
        kind and is noted in RV(problems); a file that is not JSON fails the task.
    type: path
  formats:
    description: Which files to write.
    type: list
    elements: str
    choices: [html, markdown, json, prometheus]
    default: [html, markdown, json, prometheus]
  prometheus_per_node:
    description:
      - Also write C(textfile/<node>.prom) per node, to copy into each node's node_exporter textfile directory.
    type: bool
    default: true
  resource_map:
    description:
      - Extra extended resources that count TEE keys, mapped to the misc resource they count (V(tdx), V(sev),
        V(sev_es)); added to the built-in ones (C(tdx.intel.com/keys), C(devices.kubevirt.io/tdx),
        C(sev-snp.amd.com/esids), C(devices.kubevirt.io/sev-esids)) and those NodeFeatureRules derive from
        C(cpu.security) features.
    type: dict
    default: {}
  title:
    description: The report's title.
    type: str
    default: TEE fleet report
notes:
  - Metric names follow the Prometheus conventions (C(tee_keys_capacity), C(tee_keys_in_use), C(tee_keys_free),
    C(tee_misc_events_total), C(tee_drift_findings) ...); every series has a C(node) label. Unknown values are left
    out, never written as 0. See the collection's C(docs/fleet.md) for alert rules.
seealso:
  - module: confidential.tee.tee_host_info
  - module: kubernetes.core.k8s_info
"""

EXAMPLES = r"""
- name: Preflight, capacity and hardware keys, one round trip per host
  confidential.tee.tee_host_info:
    preflight: true
  register: tee_node

# example: skip: /srv/cluster-dump is kubectl output of a real cluster (test_fleet_report.py runs this form)
- name: Write the report from offline Kubernetes objects (kubectl get ... -o json)
  confidential.tee.tee_fleet_report:
    dest: /var/www/tee
    hosts: "{{ groups['tee_nodes'] | confidential.tee.fleet_hosts(hostvars, 'tee_node') }}"
    kubernetes_dir: /srv/cluster-dump
  delegate_to: localhost
  run_once: true

# example: needs-hardware: the k8s_* results come from kubernetes.core.k8s_info against a real API server
- name: Write the report from objects read with kubernetes.core.k8s_info
  confidential.tee.tee_fleet_report:
    dest: reports/fleet
    hosts:
      - name: worker-1
        result: "{{ hostvars['worker-1'].tee_node }}"
    kubernetes:
      nodes: "{{ k8s_nodes.resources }}"
      pods: "{{ k8s_pods.resources }}"
      runtime_classes: "{{ k8s_runtime_classes.resources }}"
      node_feature_rules: "{{ k8s_rules.resources }}"
"""

RETURN = r"""
changes:
  description:
    - What changed, in the shape every module of this collection returns (docs/modules.md, result vocabulary).
    - C(written) and C(removed) (full paths; in check mode what would be), C(hidden), C(commands) and C(backups)
      (0 and empty here; a report is not backed up) and C(entries) (every file of the report with C(name),
      C(changed) and C(reasons)).
  returned: always
  type: dict
  sample: {"written": ["/var/www/tee/report.html"], "removed": [], "hidden": 0, "commands": [], "backups": [],
           "entries": [{"name": "/var/www/tee/report.html", "changed": true, "reasons": ["create"]}]}
files:
  description:
    - Deprecated, removed in release 0.3.0; read C(changes.entries) (C(name) instead of C(path); the format is
      the file's name).
    - Every file of the report with its C(path), C(format) and whether it C(changed) (or would, in check mode).
  returned: always
  type: list
  elements: dict
  sample: [{"path": "/var/www/tee/report.html", "format": "html", "changed": true}]
summary:
  description:
    - C(nodes), C(ready), C(not_ready) (names), C(unreachable) (names), C(verdicts) (count per node verdict, the
      node's preflight verdict, V(FAIL) where a critical drift finding concerns the node), C(findings), C(critical)
      and C(findings_by_id).
  returned: always
  type: dict
  sample: {"nodes": 6, "ready": 4, "not_ready": ["tdx-nomisc", "gpu-h100"], "unreachable": [],
           "verdicts": {"PASS": 2, "FAIL": 4}, "findings": 7, "critical": 4,
           "findings_by_id": {"double_pool": 1, "external_usage": 1}}
findings:
  description: Every drift finding with C(id), C(node) (V(null) for fleet-wide ones), C(resource), C(severity),
    C(title), C(numbers), C(detail) and C(fix) (ending with what this collection does about it).
  returned: always
  type: list
  elements: dict
problems:
  description: Objects or files that could not be used as given (a quantity that is not a number, a missing file).
  returned: always
  type: list
  elements: str
textfiles:
  description:
    - Each node's metrics file (full path), by node name, with O(prometheus_per_node=true); empty otherwise.
    - The name is the node name plus C(.prom) when that is one valid file name; any other name (over 250
      characters, not a DNS-1123 subdomain) gets a readable prefix and a SHA-256 digest, so two nodes never
      share a file. Consume this mapping instead of deriving file names.
  returned: always
  type: dict
  sample: {"tdx-1": "/var/www/tee/textfile/tdx-1.prom"}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.confidential.tee.plugins.module_utils.fleet.report_run import (
    ARGUMENT_SPEC,
    MUTUALLY_EXCLUSIVE,
    ReportError,
    run_report,
)


def main():
    # On the controller the action plugin (plugins/action/tee_fleet_report.py) runs the same run_report in-process.
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, mutually_exclusive=MUTUALLY_EXCLUSIVE, supports_check_mode=True)
    try:
        result = run_report(module.params, module.check_mode, module._diff)
    except ReportError as exc:
        extra = {} if exc.files is None else {"changes": exc.changes, "files": exc.files}
        module.fail_json(msg=str(exc), **extra)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
