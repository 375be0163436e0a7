# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

import json

from ansible.errors import AnsibleFilterError
from ansible_collections.confidential.tee.plugins.module_utils.fleet_report import compact_result


def fleet_hosts(names, hostvars, result_var, node_var="tee_node_name"):
    """``[{"name", "node", "result"}]`` for confidential.tee.tee_fleet_report, one per host in ``names``.

    ``result`` is the part of the host's ``result_var`` the report reads, as JSON text (``None`` when the host
    never registered it: unreachable, limited out of the play); ``node`` is its ``node_var`` or, when unset, the
    host name. Text because Ansible templates every string of a nested structure it passes to a module, and a
    hundred hosts' facts as nested data cost seconds; one string per host costs next to nothing.
    """
    if isinstance(names, str) or not isinstance(names, (list, tuple)):
        raise AnsibleFilterError("confidential.tee.fleet_hosts expects a list of host names, got %r" % (names,))
    entries = []
    for name in names:
        variables = _lookup(hostvars, name) or {}
        node = _lookup(variables, node_var)
        result = compact_result(_lookup(variables, result_var))
        text = None if result is None else json.dumps(result, sort_keys=True, default=str)
        entries.append({"name": name, "node": node or name, "result": text})
    return entries


def _lookup(mapping, key):
    """``mapping[key]`` or ``None``: HostVars has no ``get()``, and a host outside the play has no variable."""
    return mapping[key] if key in mapping else None  # noqa: SIM401 (HostVars has no get())


class FilterModule:
    def filters(self):
        return {"fleet_hosts": fleet_hosts}
