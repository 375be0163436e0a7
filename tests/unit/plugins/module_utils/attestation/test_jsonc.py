"""jsonc: JSON with comments read as RapidJSON (QCNL) or JSON5 (node-config) read it, edited in place."""

from __future__ import annotations

import json

import pytest
from ansible_collections.confidential.tee.plugins.module_utils.attestation import jsonc
from hypothesis import given
from hypothesis import strategies as st

INTEL_STYLE = """{
  // the server
  "pccs_url": "https://localhost:8081/sgx/certification/v4/"

  /* block
     comment */
  ,"use_secure_cert": true
  // ,"collateral_service": "https://api.trustedservices.intel.com/sgx/certification/v4/"
  ,"retry_times": 6
}
"""


def test_comments_anywhere_between_tokens():
    doc = jsonc.parse(INTEL_STYLE)
    assert doc.first() == {
        "pccs_url": "https://localhost:8081/sgx/certification/v4/",
        "use_secure_cert": True,
        "retry_times": 6,
    }


def test_comment_markers_inside_strings_are_text():
    doc = jsonc.parse('{"a": "http://x//y /* z */", "b": 1} // end\n')
    assert doc.first() == {"a": "http://x//y /* z */", "b": 1}


def test_duplicates_first_for_rapidjson_last_for_json5():
    doc = jsonc.parse('{"a": 1, "b": 2, "a": 3}')
    assert doc.first()["a"] == 1 and doc.last()["a"] == 3 and doc.duplicates() == ["a"]


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('{"a": 1,}', "trailing comma"),
        ('{"a": NaN}', "NaN is not JSON"),
        ('{"a": Infinity}', "not JSON"),
        ('{"a": 1} {"b": 2}', "content after the closing"),
        ('{"a": 1 /* open', "unterminated"),
        ("[1, 2]", "must be a JSON object"),
        ("", "must be a JSON object"),
        ("{a: 1}", "member name in double quotes"),
        ('{"a" 1}', "expected ':'"),
        ('{"a": 1 "b": 2}', "expected ',' or '}'"),
        ("\ufeff{}", "byte-order mark"),
        ('{"a": "line\nbreak"}', "bad value"),
    ],
)
def test_errors_name_line_and_column(text, fragment):
    with pytest.raises(jsonc.JsoncError) as raised:
        jsonc.parse(text)
    assert fragment in str(raised.value) and str(raised.value).startswith("line ")


def test_error_position():
    with pytest.raises(jsonc.JsoncError) as raised:
        jsonc.parse('{\n  "a": 1,\n  "b": tru\n}')
    assert (raised.value.line, raised.value.column) == (3, 8)


def test_trailing_comma_accepted_for_json5_readers():
    assert jsonc.parse('{"a": {"b": 1,}, // c\n}', trailing_commas=True).last() == {"a": {"b": 1}}


def test_set_replaces_only_the_value_and_keeps_every_comment():
    text = jsonc.set_member(INTEL_STYLE, "use_secure_cert", False)
    assert text == INTEL_STYLE.replace('"use_secure_cert": true', '"use_secure_cert": false')


def test_set_adds_in_the_files_comma_style():
    added = jsonc.set_member(INTEL_STYLE, "retry_delay", 10)
    assert '  ,"retry_delay": 10\n}' in added
    plain = jsonc.set_member('{\n    "a": 1\n}\n', "b", [1, 2])
    assert plain == '{\n    "a": 1,\n    "b": [1, 2]\n}\n'


def test_set_removes_duplicates_so_every_reader_agrees():
    text = jsonc.set_member('{"a": 1, "b": 2, "a": 3}', "a", 9)
    doc = jsonc.parse(text)
    assert doc.first() == doc.last() == {"a": 9, "b": 2}


def test_set_objects_spread_over_lines():
    text = jsonc.set_member('{\n  "x": 1\n}', "opts", {"get_cert": {"headers": {"h": "v"}}})
    assert jsonc.parse(text).first()["opts"] == {"get_cert": {"headers": {"h": "v"}}}
    assert '\n  "opts": {\n' in text


def test_remove_first_middle_last():
    text = '{"a": 1, "b": 2, "c": 3}'
    for key in "abc":
        assert key not in jsonc.parse(jsonc.remove_member(text, key)).first()
    assert jsonc.remove_member(text, "zzz") == text


def test_redact_values_at_paths_even_nested():
    text = '{"ApiKey": "k", "mysql": {"password": "p", "user": "u"}, "x": 1}'
    shown = jsonc.redact(text, [("ApiKey",), ("mysql", "password")])
    assert json.loads(shown) == {"ApiKey": "<redacted>", "mysql": {"password": "<redacted>", "user": "u"}, "x": 1}


def test_redact_unparsable_text_line_by_line():
    shown = jsonc.redact('{\n "ApiKey": "secret-value",\n broken', [("ApiKey",)])
    assert "secret-value" not in shown and "broken" in shown


KEYS = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=8)
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
    max_leaves=6,
)


@given(st.dictionaries(KEYS, VALUES, max_size=4), KEYS, VALUES)
def test_set_then_read_back(initial, key, value):
    text = "{\n  // kept\n" + ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in initial.items()) + "\n}\n"
    result = jsonc.set_member(text, key, value)
    assert jsonc.parse(result).first() == {**initial, key: value}
    assert "// kept" in result


def test_set_member_writes_through_the_json_emitter():
    """Values go through common/emit/json.py: NaN (which RapidJSON and JSON5 readers refuse, json.dumps writes) is
    refused naming the key, and what is written reads back to the value."""
    from ansible_collections.confidential.tee.plugins.module_utils.common.emit import EmitError

    text = '{\n    "pccs_url": "https://a"\n}\n'
    with pytest.raises(EmitError, match="retry_delay"):
        jsonc.set_member(text, "retry_delay", float("nan"))
    value = {"b": [1, "é\u2028"], "a": {"x": None}}
    written = jsonc.set_member(text, "custom", value)
    assert json.loads(written) == {"pccs_url": "https://a", "custom": value}
    assert json.loads(jsonc.set_member(text, 'k"\n', 1)) == {"pccs_url": "https://a", 'k"\n': 1}
