# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""Action plugin for confidential.tee.tee_inventory_check: inventory variables with this collection's prefixes that
nothing reads, reported with the name they probably meant (a warning, or a failure with ``strict``).

It runs in Ansible's worker on the controller: the known names are files of the installed collection (the roles'
argument specs and defaults, the playbooks' variables, the facts the collection sets), and the names to check are
every host's inventory variables, which only the controller has.
"""

from __future__ import annotations

from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase
from ansible_collections.confidential.tee.plugins.module_utils.common.known_variables import (
    describe,
    known_variables,
    unknown_variables,
)
from ansible_collections.confidential.tee.plugins.plugin_utils import cluster_inventory

CLUSTER_SPEC = {
    "hosts": {"type": "list", "elements": "str", "default": []},
    "variables": {"type": "dict", "default": {}},
    "openshift": {"type": "bool", "default": False},
    "host_facts": {"type": "raw", "default": False},
}


def _set_at_runtime(hostvars):
    """``host -> names`` registered or set as facts during the run (by any play, the user's own included): those are
    not inventory variables. Read from the variable manager's caches, when this ansible-core exposes them."""
    manager = getattr(hostvars, "_variable_manager", None)
    caches = [getattr(manager, name, None) for name in ("_nonpersistent_fact_cache", "_fact_cache")]

    def names(host: str) -> set[str]:
        found: set[str] = set()
        for cache in caches:
            try:
                found.update((cache or {}).get(host) or {})
            except (KeyError, TypeError, AttributeError):
                continue
        return found

    return names


def _read(hostvars, hosts, node_hosts):
    """One read of each host's variables (ansible-core merges them anew for every read: 0.3 ms a host): the names
    of those of ``hosts`` as set in the inventory, and the cluster playbook's node variables of ``node_hosts``, in
    their order (issue 31)."""
    runtime = _set_at_runtime(hostvars)
    wanted = dict.fromkeys(hosts)
    seen, nodes = {}, dict.fromkeys(node_hosts)
    for host in dict.fromkeys([*wanted, *nodes]):
        stored = cluster_inventory.stored_variables(hostvars, host)
        if host in wanted:
            seen[host] = [name for name in stored if name not in runtime(host)]
        if host in nodes:
            nodes[host] = cluster_inventory.node_variables(hostvars, host, stored)
    return seen, nodes


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False
    _supports_check_mode = True
    _supports_async = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _validation, params = self.validate_argument_spec(
            {
                "strict": {"type": "bool", "default": False},
                "cluster": {"type": "dict", "options": CLUSTER_SPEC},
            }
        )
        task_vars = task_vars or {}
        hostvars = task_vars.get("hostvars", {})
        names = dict.fromkeys([*task_vars.get("groups", {}).get("all", []), task_vars.get("inventory_hostname")])
        cluster = params["cluster"]
        seen, nodes = _read(hostvars, [h for h in names if h], cluster["hosts"] if cluster else [])
        if cluster:
            result["cluster"] = cluster_inventory.summary(
                nodes, cluster["variables"], cluster["openshift"], cluster["host_facts"]
            )
        known, owned = known_variables()
        found = unknown_variables(seen, known, owned)
        lines = [describe(entry, len(seen)) for entry in found]
        result.update(changed=False, unknown=found, known=len(known))
        strict = boolean(params["strict"])
        if lines and strict:
            result.update(failed=True, msg="Unknown inventory variables (tee_strict_variables): " + "; ".join(lines))
        elif lines:
            result["warnings"] = [*lines, "set tee_strict_variables: true to make these errors"]
            result["msg"] = f"{len(lines)} unknown inventory variable(s)"
        else:
            result["msg"] = f"no unknown variable with the prefixes {', '.join(owned)}"
        return result
