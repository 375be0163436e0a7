# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.confidential.tee.plugins.module_utils.fleet.fleet_report import fleet_host_entries


def fleet_hosts(names, hostvars, result_var, node_var="tee_node_name"):
    """The host list confidential.tee.tee_fleet_report takes (see fleet_report.fleet_host_entries)."""
    try:
        return fleet_host_entries(names, hostvars, result_var, node_var)
    except TypeError as exc:
        raise AnsibleFilterError("confidential.tee.fleet_hosts %s" % exc) from None


class FilterModule:
    def filters(self):
        return {"fleet_hosts": fleet_hosts}
