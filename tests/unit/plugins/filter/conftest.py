"""Filters are controller code: importing one (``ansible.errors``) switches ansible's module_utils into controller
mode for the whole process, and module warnings then go to the display instead of the result the module tests
read. So filter tests call their filter in a child interpreter (``call_filter``), never by importing it here."""

from __future__ import annotations

import json
import os
import subprocess
import sys

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
def call_filter():
    """``call_filter(module, function, *args) -> {"value": ...} or {"filter_error": message}``."""

    def call(module: str, name: str, *args):
        done = subprocess.run(
            [sys.executable, "-c", CHILD],
            input=json.dumps([module, name, args]),
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
        return json.loads(done.stdout)

    return call
