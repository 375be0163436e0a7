# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.confidential.tee.plugins.module_utils.fleet.fleet_report import fleet_host_entries
from ansible_collections.confidential.tee.plugins.plugin_utils.cluster_inventory import plain, stored_variables


def _read(names, hostvars, result_var, node_var) -> dict:
    """``{host: {result_var, node_var}}`` from each host's stored variables, read once: the registered result as
    stored (module data is never templated; templating a 10 KB result per host was most of the report's per-host cost
    on the controller), the node name templated only when it holds a template."""
    found = {}
    for name in names:
        if name not in hostvars:
            continue
        stored = stored_variables(hostvars, name)
        found[name] = {key: stored[key] for key in (result_var, node_var) if key in stored}
        if node_var in stored and not plain(stored[node_var]):
            found[name][node_var] = hostvars[name][node_var]
    return found


def fleet_hosts(names, hostvars, result_var, node_var="tee_node_name"):
    """The host list confidential.tee.tee_fleet_report takes (see fleet_report.fleet_host_entries)."""
    try:
        if isinstance(names, (list, tuple)):
            hostvars = _read(names, hostvars, result_var, node_var)
        return fleet_host_entries(names, hostvars, result_var, node_var)
    except TypeError as exc:
        raise AnsibleFilterError("confidential.tee.fleet_hosts %s" % exc) from None


class FilterModule:
    def filters(self):
        return {"fleet_hosts": fleet_hosts}
