# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""Filters the cluster roles render with: thin wrappers over the pure functions in module_utils.

Every rule lives in module_utils; a filter only turns the module_utils error into an AnsibleFilterError
that names the filter, the node and the inventory variable (``plugin_utils.filter_refusal``). A refused key-pool
plan is raised as it is (:func:`accepted`): its message already names the node and the variable.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import yaml
from ansible.errors import AnsibleFilterError
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.parsing.yaml.dumper import AnsibleDumper
from ansible_collections.confidential.tee.plugins.module_utils.cluster import (
    gpu_cc,
    inputs,
    key_agent,
    kubevirt_objects,
)
from ansible_collections.confidential.tee.plugins.module_utils.cluster import nfd_rules as nfd
from ansible_collections.confidential.tee.plugins.module_utils.cluster import openshift_sandboxed as osc
from ansible_collections.confidential.tee.plugins.module_utils.cluster import runtimeclasses as rc
from ansible_collections.confidential.tee.plugins.module_utils.cluster.key_pools import (
    KeyPoolError,
    foreign_key_rules,
    stale_rules,
)
from ansible_collections.confidential.tee.plugins.module_utils.cluster.kubevirt_cc import KubeVirtConfigError
from ansible_collections.confidential.tee.plugins.module_utils.common import manifests
from ansible_collections.confidential.tee.plugins.plugin_utils import cluster_inventory as inventory
from ansible_collections.confidential.tee.plugins.plugin_utils import kube_target as target
from ansible_collections.confidential.tee.plugins.plugin_utils.filter_refusal import refusing

_ERRORS = (
    KeyPoolError,
    KubeVirtConfigError,
    gpu_cc.GpuCcError,
    key_agent.KeyAgentError,
    osc.OpenShiftConfigError,
    manifests.ManifestError,
    KeyError,
    TypeError,
    ValueError,
)


def accepted(plan):
    """``plan`` itself, unless the planner refused it (``{refused: message}``, as ``cluster_inventory.key_pools_plan``
    returns it): then an ``AnsibleFilterError`` whose message is the plan's own, as the tee_key_pools module fails with
    it (it names the node and the inventory variable to change). The filter that plans and the filters that render
    from a plan call it, so a playbook that forgets to check ``refused`` stops there instead of rendering from a
    refused plan (issue 43)."""
    if isinstance(plan, Mapping) and "refused" in plan:
        raise AnsibleFilterError(str(plan["refused"]))
    return plan


def nfd_tee_rule(plan, name="confidential-tee-keys", flavor="kubernetes", namespace=None):
    return nfd.node_feature_rule(accepted(plan), name, flavor, namespace)


def nfd_foreign_key_rules(rules, own_names=(), remove_names=()):
    return foreign_key_rules(rules, own_names, remove_names)


def nfd_stale_rules(rules):
    return stale_rules(rules)


def kata_runtimeclasses(
    plan, gpu=False, overheads=None, node_selector=None, flavor="kubernetes", kata_cc_name="kata-cc"
):
    plan = accepted(plan)
    if flavor == "openshift":
        return rc.openshift_kata_cc(plan, kata_cc_name)
    return rc.kata_classes(plan, gpu=gpu, overheads=overheads, node_selector=node_selector)


def kubevirt_cc(plan, nodes, options):
    return kubevirt_objects.render(accepted(plan), nodes, options)


def kernel_key_pool(plan, options=None):
    return key_agent.render(plan, options)


def openshift_sandboxed(
    gates,
    kataconfig_name="cluster-kataconfig",
    check_node_eligibility=True,
    pool_selector=None,
    log_level=None,
    namespace=osc.OPERATOR_NAMESPACE,
):
    configmap, warnings = osc.feature_gates(gates, namespace)
    kata = osc.kata_config(kataconfig_name, check_node_eligibility, pool_selector, log_level)
    return {"objects": [configmap, kata], "warnings": warnings}


def gpu_cc_kubelet_dropin(gates, kubernetes_version=None, runtime_request_timeout="20m", extra_known=()):
    wanted = gpu_cc.default_kubelet_gates(kubernetes_version) if gates is None else gates
    return gpu_cc.kubelet_dropin(gpu_cc.kubelet_gates(wanted, kubernetes_version, extra_known), runtime_request_timeout)


def gpu_cc_containerd_dropin(settings):
    return gpu_cc.containerd_dropin(settings)


def gpu_cc_containerd_ready(version_output, minimum, config_text, config_path, dropin_path):
    version = gpu_cc.check_containerd_version(version_output, minimum)[0]
    if not gpu_cc.imports_cover(config_text, config_path, dropin_path):
        raise gpu_cc.GpuCcError(
            "%s does not import %s, so containerd would ignore the drop-in: add "
            'imports = ["%s/*.toml"] at the top of %s (containerd config default has it since 2.2) and restart '
            "containerd" % (config_path, dropin_path, dropin_path.rsplit("/", 1)[0], config_path),
            option="containerd_config",
        )
    return {"version": ".".join(str(v) for v in version), "imports_dropin": True}


def gpu_cc_mode_plan(labels, node, desired, pods, drain=False):
    return gpu_cc.cc_mode_plan(node, labels, desired, gpu_cc.gpu_workloads(pods, node), drain)


def gpu_cc_mode_plans(requests, nodes, pods=None, label=gpu_cc.CC_MODE_LABEL):
    return gpu_cc.cc_mode_plans(requests, nodes, pods, label)


def manifest_files(objects, owner="confidential.tee"):
    """``[{file, content}]``: YAML is rendered here, on the controller, so the writing module stays stdlib-only."""
    head = manifests.marker(owner)
    return [
        {
            "file": f["file"],
            # Ansible's dumper understands the tagged values templating produces; safe_dump does not.
            "content": head + yaml.dump(f["object"], Dumper=AnsibleDumper, default_flow_style=False, sort_keys=True),
            # Secrets go to tee_manifests' secret_files: written 0600, never shown.
            "secret": f["object"].get("kind") == "Secret",
        }
        for f in manifests.manifest_files(objects)
    ]


UNSET = inventory.UNSET


def cluster_input_errors(hosts, hostvars, cluster=None):
    """Every problem of the cluster playbook's inventory: ``hosts`` the node group, ``cluster`` the play's variables."""
    nodes = {}
    for host in hosts or []:
        seen = hostvars[host]
        nodes[host] = {name: seen[name] for name in inputs.NODE_VARS if name in seen}
    # The playbook passes every name, the unset ones as UNSET (ansible.builtin.vars' default).
    wide = {k: v for k, v in (cluster or {}).items() if k in inputs.CLUSTER_VARS and v != UNSET}
    return inputs.input_problems(wide, nodes)


def cluster_nodes(hosts, hostvars):
    """The node group as data, in one pass: ``nodes`` for the key-pool plan and ``gpu_hosts`` for the GPU plays.

    One controller-side task instead of a task (a worker) per node: 5,000 nodes cost about what 10 do.
    """
    nodes, gpu_hosts = [], []
    for host in hosts or []:
        seen = hostvars[host]
        nodes.append(inputs.cluster_node(host, seen))
        if boolean(seen.get("tee_node_gpu", False), strict=False):
            gpu_hosts.append(host)
    unknown = [node["name"] for node in nodes if node["vendor"] not in inputs.PLANNED_VENDORS]
    qgs = [{"name": node["name"], "qgs": node["qgs"]} for node in nodes if node["qgs"] is not None]
    return {"nodes": nodes, "gpu_hosts": gpu_hosts, "unknown_vendor": unknown, "qgs_nodes": qgs}


def cluster_inventory(hosts, hostvars, cluster=None, openshift=False, host_facts=False):
    """Everything the cluster playbook needs of its inventory, from one read of every node's variables
    (``plugin_utils.cluster_inventory.summary``): the input problems, the GPU hosts, the nodes without a CPU vendor,
    the QGS facts and the key-pool plan. The nodes themselves stay here: 5,000 of them in a fact cost a copy in every
    task that templates it (issue 31)."""
    seen = {
        host: inventory.node_variables(hostvars, host, inventory.stored_variables(hostvars, host))
        for host in dict.fromkeys(hosts or [])
    }
    return inventory.summary(seen, cluster, openshift, host_facts)


def key_pools_plan(nodes, rule_name="confidential-tee-keys", openshift=False, per_node=True):
    """The key-pool plan of the tee_key_pools module, computed where the nodes already are (the controller): the cluster
    playbook's 5,000 nodes then travel to no module and back (issue 31). ``per_node`` false leaves out the per-node
    map ``nodes``, which no role reads (every role validates, and so copies, the plan it is given).

    A refused plan stops the task here with the plan's own message (:func:`accepted`): no playbook can
    carry on with it, whether or not it checks ``refused`` (issue 43)."""
    return accepted(inventory.key_pools_plan(nodes, rule_name, openshift, per_node))


def cluster_failed_nodes(fact_hosts, hostvars, gpu_hosts=()):
    """The nodes whose host facts or GPU role failed, from their stored variables (``hostvars.raw_get``): one flag
    per node, where templating each node's whole ``tee_host_info`` result cost a copy of it (issue 31, C2)."""

    def variables(host):
        found = hostvars.raw_get(host) if hasattr(hostvars, "raw_get") else hostvars.get(host)
        return found if isinstance(found, Mapping) else {}

    return inputs.unfinished_nodes(gpu_hosts, fact_hosts, variables)


def output_dir(value=None, default="manifests", name="tee_manifest_dir"):
    """The absolute output directory: relative to where ansible-playbook was started (this process's cwd)."""
    return inputs.resolve_output_dir(value, os.getcwd(), default, name)


def kube_target(kubeconfig=None, context=None, host=None):
    """Where an apply would go (kubeconfig, context, server), read before any API call; ``error`` says why not."""
    return target.kube_target(kubeconfig, context, host, os.environ)


class FilterModule:
    def filters(self):
        funcs = (
            nfd_tee_rule,
            nfd_foreign_key_rules,
            nfd_stale_rules,
            kata_runtimeclasses,
            kubevirt_cc,
            kernel_key_pool,
            openshift_sandboxed,
            gpu_cc_kubelet_dropin,
            gpu_cc_containerd_dropin,
            gpu_cc_containerd_ready,
            gpu_cc_mode_plan,
            gpu_cc_mode_plans,
            manifest_files,
            cluster_input_errors,
            output_dir,
            cluster_nodes,
            cluster_inventory,
            cluster_failed_nodes,
            key_pools_plan,
            kube_target,
        )
        return {f.__name__: refusing(f.__name__, f, _ERRORS) for f in funcs}
