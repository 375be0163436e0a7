"""confidential.tee.name_list: names for a message, run in a controller process as Ansible runs filters."""

from __future__ import annotations

import pytest


@pytest.fixture
def name_list(call_filter):
    return lambda *args: call_filter("text", "name_list", *args)


def test_the_filter_shows_a_few_names_and_counts_the_rest(name_list):
    assert name_list(["b", "a"]) == {"value": "b, a"}
    assert name_list([f"n{i}" for i in range(12)]) == {"value": ", ".join(f"n{i}" for i in range(10)) + " and 2 more"}
    assert name_list(["b", "a"], 1) == {"value": "b and 1 more"}
    assert name_list([]) == {"value": ""}


def test_the_filter_refuses_what_is_not_a_list_of_names(name_list):
    assert "list" in name_list("a,b")["filter_error"]
    for shown in (0, -1, True, "3"):
        assert "shown must be a whole number of at least 1" in name_list(["a"], shown)["filter_error"]
