"""The fleet_hosts filter: one entry per host, reachable or not."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.confidential.tee.plugins.filter.fleet import FilterModule, fleet_hosts


def test_entries_with_node_names_and_results():
    failed = {"failed": True, "msg": "host_root /x is not a directory", "invocation": {"module_args": {}}}
    hostvars = {"a": {"tee_node_name": "node-a", "r": failed}, "b": {}}
    assert fleet_hosts(["a", "b", "c"], hostvars, "r") == [
        {"name": "a", "node": "node-a", "result": '{"failed": true, "msg": "host_root /x is not a directory"}'},
        {"name": "b", "node": "b", "result": None},
        {"name": "c", "node": "c", "result": None},
    ]


@pytest.mark.parametrize("names", ["a,b", None, 3])
def test_names_must_be_a_list(names):
    with pytest.raises(AnsibleFilterError, match="expects a list of host names"):
        fleet_hosts(names, {}, "r")


def test_registered():
    assert FilterModule().filters()["fleet_hosts"] is fleet_hosts
