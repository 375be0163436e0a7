"""Names in messages: the first few and a count of the rest."""

from __future__ import annotations

from ansible_collections.confidential.tee.plugins.module_utils.common.text import name_list


def test_a_short_list_is_every_name():
    assert name_list([]) == ""
    assert name_list(["a"]) == "a"
    assert name_list([f"node-{i}" for i in range(10)]) == ", ".join(f"node-{i}" for i in range(10))


def test_a_long_list_shows_the_first_names_and_counts_the_rest():
    names = [f"node-{i:05d}" for i in range(5000)]
    assert name_list(names) == ", ".join(names[:10]) + " and 4,990 more"
    assert name_list(names, 2) == "node-00000, node-00001 and 4,998 more"
