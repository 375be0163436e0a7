"""Filters are controller code: they run in a child interpreter (``call_filter``, on ``controller_child`` from
../conftest.py), never imported here."""

from __future__ import annotations

import pytest

CHILD = """
import importlib, json, sys
from ansible.errors import AnsibleFilterError
module, name, args = json.loads(sys.stdin.read())
function = getattr(importlib.import_module("ansible_collections.confidential.tee.plugins.filter." + module), name)
try:
    print(json.dumps({"value": function(*args)}))
except AnsibleFilterError as error:
    print(json.dumps({"filter_error": str(error)}))
"""


@pytest.fixture
def call_filter(controller_child):
    """``call_filter(module, function, *args) -> {"value": ...} or {"filter_error": message}``."""

    def call(module: str, name: str, *args):
        return controller_child(CHILD, [module, name, args])

    return call
