"""emit.toml: canonical TOML that tomllib reads back to the same data."""

from __future__ import annotations

import tomllib

import pytest
from ansible_collections.confidential.tee.plugins.module_utils.common.emit import toml as toml_emit
from hypothesis import given
from hypothesis import strategies as st

keys = st.text(min_size=1, max_size=12)
scalars = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=40),
)
values = st.recursive(
    scalars | st.lists(scalars, max_size=4),
    lambda children: (
        st.dictionaries(keys, children, max_size=4)
        | st.lists(st.dictionaries(keys, children, max_size=3), min_size=1, max_size=3)
    ),
    max_leaves=12,
)


@given(st.dictionaries(keys, values, max_size=6))
def test_round_trip_through_tomllib(data):
    assert tomllib.loads(toml_emit.dumps(data)) == data


@given(st.dictionaries(keys, values, max_size=6))
def test_same_data_same_bytes_whatever_the_key_order(data):
    reordered = dict(reversed(list(data.items())))
    assert toml_emit.dumps(reordered) == toml_emit.dumps(data)


@given(st.text(max_size=200))
def test_multiline_strings_read_back_exactly(text):
    document = toml_emit.dumps({"doc": text}, multiline_keys=("doc",))
    assert tomllib.loads(document)["doc"] == text


def test_embedded_documents_stay_readable():
    document = toml_emit.dumps(
        {"data": {"policy.rego": "package agent_policy\n\ndefault A := true\n"}}, ["policy.rego"]
    )
    assert "\"policy.rego\" = '''\npackage agent_policy\n" in document


def test_tables_holding_only_tables_get_no_header():
    document = toml_emit.dumps({"plugins": {"io.containerd.cri.v1.images": {"x": 1}}})
    assert document == '[plugins."io.containerd.cri.v1.images"]\nx = 1\n'


@pytest.mark.parametrize(
    "data, message",
    [
        ({"a": None}, "a is null"),
        ({"a": {"b": float("nan")}}, "only finite numbers"),
        ({"a": 2**64}, "64-bit"),
        ({"a": {1, 2}}, "set values have no TOML form"),
        ({1: "x"}, "must be a string"),
        (["not", "a", "mapping"], "a TOML document is a mapping"),
    ],
)
def test_data_without_a_toml_form_is_refused_with_its_path(data, message):
    with pytest.raises(toml_emit.TomlError, match=message):
        toml_emit.dumps(data)
