"""confidential.tee.list_errors: what roles/role_inputs refuses, given a role's argument_specs options.

The filter is controller code: it runs in a child interpreter (``call_filter``, tests/unit/plugins/filter/conftest.py).
"""

from __future__ import annotations

import pytest


@pytest.fixture
def list_errors(call_filter):
    return lambda *args: call_filter("cmdline", "list_errors", *args)["value"]


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
def test_list_errors_by_spec(list_errors, values, expected):
    errors = list_errors(values, OPTIONS)
    assert len(errors) == len(expected), errors
    for error, start in zip(errors, expected, strict=True):
        assert error.startswith(start), error


def test_every_offending_variable_is_named_in_name_order(list_errors):
    errors = list_errors({"r_nodes": "a=1", "r_args": "x"}, OPTIONS)
    assert [e.split()[0] for e in errors] == ["r_args", "r_nodes"]


def test_the_inventory_variable_a_default_reads_is_named(list_errors):
    defaults = {"r_nodes": "{{ tee_cluster_nodes | default([]) }}", "r_args": ["a"]}
    [error] = list_errors({"r_nodes": "name=a"}, OPTIONS, defaults)
    assert error.endswith("(r_nodes defaults to tee_cluster_nodes: fix whichever you set)")
    [error] = list_errors({"r_args": "a,b"}, OPTIONS, defaults)
    assert "defaults to" not in error


def test_without_options_every_value_must_be_a_list_of_strings(list_errors):
    assert list_errors({"a": ["x"], "b": None}) == ["b must be a list of strings, got NoneType None"]
