"""emit.json: json.loads reads every document back to the same data; NaN and Infinity are refused by name."""

import json
import math

import pytest
from ansible_collections.confidential.tee.plugins.module_utils.common.emit import EmitError
from ansible_collections.confidential.tee.plugins.module_utils.common.emit import json as emit_json
from hypothesis import given, settings
from hypothesis import strategies as st

SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
DATA = st.recursive(SCALARS, lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner), max_leaves=15)


@settings(max_examples=100, deadline=None)
@given(DATA)
def test_documents_read_back(data):
    assert json.loads(emit_json.dumps(data)) == data


@pytest.mark.parametrize("number", [math.nan, math.inf, -math.inf])
def test_non_finite_numbers_are_refused(number):
    with pytest.raises(EmitError, match="settings"):
        emit_json.dumps({"x": number}, "settings")
