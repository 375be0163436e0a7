"""Controller code (filters, action plugins) is tested in a child interpreter: importing it (``ansible.errors``,
``ansible.playbook``) switches ansible's module_utils into controller mode for the whole process, and module
warnings then go to the display instead of the result the module tests read."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


@pytest.fixture
def controller_child():
    """``controller_child(code, payload, cwd=None)``: run ``code`` in a fresh interpreter with ``payload`` as JSON on
    its standard input and this test's ``sys.path``; returns what it printed, read as JSON."""

    def run(code: str, payload, cwd=None):
        done = subprocess.run(
            [sys.executable, "-c", code],
            input=json.dumps(payload),
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
            cwd=cwd,
        )
        return json.loads(done.stdout)

    return run
