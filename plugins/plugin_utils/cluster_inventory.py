# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""The cluster playbook's node group read once, on the controller (issue 31).

Every read of a host's variables (``hostvars[host]``) is ansible-core's whole variable merge for that host, about
0.3 ms: at 5,000 nodes each pass over the inventory cost 1.5 to 3 s. The inventory check
(``tee_inventory_check``, which reads every host's variable names anyway) and the ``cluster_inventory`` filter hand
each host's stored variables here, and everything the playbook needs of the nodes comes out of that one read: the
input problems, the GPU hosts, the nodes without a CPU vendor, the QGS facts and the key-pool plan.
"""

from __future__ import annotations

from collections.abc import Mapping

from ansible.module_utils.parsing.convert_bool import boolean
from ansible_collections.confidential.tee.plugins.module_utils.cluster import inputs
from ansible_collections.confidential.tee.plugins.module_utils.cluster.key_pools import KeyPoolError
from ansible_collections.confidential.tee.plugins.module_utils.cluster.key_pools import plan as plan_key_pools

# ansible.builtin.vars' default for a cluster-wide variable that is not set (the playbook passes every name).
UNSET = "__confidential_tee_unset__"
FACTS = "tee_host"


def stored_variables(hostvars, host) -> Mapping:
    """``host``'s variables as stored, untemplated (``hostvars.raw_get``); templated where that is not there."""
    raw = hostvars.raw_get(host) if hasattr(hostvars, "raw_get") else None
    return raw if isinstance(raw, Mapping) else hostvars[host]


def plain(value) -> bool:
    """Whether templating ``value`` returns it unchanged: no string in it can hold a template (``{{``, ``{%`` and
    ``{#`` all start with a brace)."""
    if isinstance(value, str):
        return "{" not in value
    if isinstance(value, (list, tuple)):
        return all(plain(item) for item in value)
    return value is None or isinstance(value, (bool, int, float))


def node_variables(hostvars, host, stored: Mapping) -> dict:
    """The node variables of ``host`` (and its ``tee_host`` facts) as a task templating ``hostvars[host][name]`` sees
    them, from its ``stored`` variables: a value that cannot hold a template is taken as stored, and only a host with a
    templated one is templated (templating every value cost as much as the read). Facts are never templated."""
    found = {name: stored[name] for name in inputs.NODE_VARS if name in stored}
    if not all(plain(value) for value in found.values()):
        templated = hostvars[host]
        found = {name: templated[name] for name in found}
    if FACTS in stored:
        found[FACTS] = stored[FACTS]
    return found


# The plan's parts with an entry per node (the per-node map, one summary line per node).
PER_NODE_KEYS = ("nodes", "summary")


def key_pools_plan(nodes, rule_name="confidential-tee-keys", openshift=False, per_node=True) -> dict:
    """The tee_key_pools module's plan; ``{refused: message}`` when it gives keys two pools (as data, for
    :func:`summary`: the cluster playbook fails with the message in a task of its own; the filters raise it,
    ``filter.cluster.accepted``). ``per_node`` false leaves out what has an entry
    per node, ``nodes`` and ``summary``, which no role reads (every role validates, and so copies, the plan it is given;
    the roles print ``overview``)."""
    try:
        found = plan_key_pools(nodes, rule_name, boolean(openshift, strict=True))
    except KeyPoolError as exc:
        return {"refused": str(exc)}
    return found if boolean(per_node, strict=True) else {k: v for k, v in found.items() if k not in PER_NODE_KEYS}


def summary(seen: dict, cluster=None, openshift=False, host_facts=False) -> dict:
    """What the playbook needs of the nodes ``seen`` (``{host: node_variables}``, inventory order) and the cluster-wide
    variables ``cluster``: ``errors`` (every input problem), ``gpu_hosts``, ``unknown_vendor``, ``qgs_nodes`` and the
    key-pool ``plan`` (without its per-node map), ``none`` when there are problems or when ``host_facts`` says the
    facts are read later (read only once the cluster-wide variables passed the check)."""
    wide = {k: v for k, v in (cluster or {}).items() if k in inputs.CLUSTER_VARS and v != UNSET}
    errors = inputs.input_problems(
        wide, {host: {k: v for k, v in hv.items() if k != FACTS} for host, hv in seen.items()}
    )
    found = {"errors": errors, "gpu_hosts": [], "unknown_vendor": [], "qgs_nodes": [], "plan": None}
    if errors:
        return found
    nodes = [inputs.cluster_node(host, hv) for host, hv in seen.items()]
    found["gpu_hosts"] = [h for h, hv in seen.items() if boolean(hv.get("tee_node_gpu", False), strict=False)]
    found["unknown_vendor"] = [node["name"] for node in nodes if node["vendor"] not in inputs.PLANNED_VENDORS]
    found["qgs_nodes"] = [{"name": node["name"], "qgs": node["qgs"]} for node in nodes if node["qgs"] is not None]
    if not found["unknown_vendor"] and not boolean(host_facts, strict=False):
        found["plan"] = key_pools_plan(nodes, openshift=openshift, per_node=False)
    return found
