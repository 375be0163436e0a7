"""confidential.tee.list_errors: what roles/role_inputs refuses, given a role's argument_specs options.

The filter is controller code: importing it (ansible.errors) switches ansible's module_utils into controller
mode for the whole process, and module warnings then go to the display instead of the result that the module
tests read. So it runs in a child interpreter here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

CHILD = """
import json, sys
from ansible_collections.confidential.tee.plugins.filter.cmdline import list_errors
print(json.dumps(list_errors(*json.loads(sys.stdin.read()))))
"""


def list_errors(*args):
    done = subprocess.run(
        [sys.executable, "-c", CHILD],
        input=json.dumps(args),
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    return json.loads(done.stdout)


OPTIONS = {
    "r_args": {"type": "list", "elements": "str", "default": []},
    "r_nodes": {"type": "list", "elements": "dict"},
    "r_gates": {"type": "list", "elements": "str"},
    "r_name": {"type": "str"},
}


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({"r_args": ["iommu=pt,nomerge"], "r_nodes": [{"name": "a"}], "r_gates": ["A"]}, []),
        ({"r_args": "nomodeset,quiet"}, ["r_args must be a list, got the string 'nomodeset,quiet'"]),
        ({"r_args": [1]}, ["r_args must hold strings only, got 1 (int)"]),
        ({"r_args": None}, ["r_args must be a list of strings, got NoneType None"]),  # documents []
        ({"r_gates": None, "r_nodes": None}, []),  # no other default documented: null passes, as in Ansible
        ({"r_nodes": "name=tdx-1,vendor=intel"}, ["r_nodes must be a list of mappings, got the string"]),
        ({"r_nodes": ["name=tdx-1"]}, ["r_nodes must hold mappings only, got 'name=tdx-1' (str)"]),
        ({"r_nodes": {"name": "a"}}, ["r_nodes must be a list of mappings, got dict"]),
        ({"r_name": "a,b"}, []),  # not a list option
    ],
)
def test_list_errors_by_spec(values, expected):
    errors = list_errors(values, OPTIONS)
    assert len(errors) == len(expected), errors
    for error, start in zip(errors, expected, strict=True):
        assert error.startswith(start), error


def test_every_offending_variable_is_named_in_name_order():
    errors = list_errors({"r_nodes": "a=1", "r_args": "x"}, OPTIONS)
    assert [e.split()[0] for e in errors] == ["r_args", "r_nodes"]


def test_the_inventory_variable_a_default_reads_is_named():
    defaults = {"r_nodes": "{{ tee_cluster_nodes | default([]) }}", "r_args": ["a"]}
    [error] = list_errors({"r_nodes": "name=a"}, OPTIONS, defaults)
    assert error.endswith("(r_nodes defaults to tee_cluster_nodes: fix whichever you set)")
    [error] = list_errors({"r_args": "a,b"}, OPTIONS, defaults)
    assert "defaults to" not in error


def test_without_options_every_value_must_be_a_list_of_strings():
    assert list_errors({"a": ["x"], "b": None}) == ["b must be a list of strings, got NoneType None"]
