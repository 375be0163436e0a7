"""docs/device-plugin.md's worked ``teesim serve`` example is the output of the command it shows.

The block after the ``generated-by`` comment is run as written (``teesim`` from this checkout, ``python``
this interpreter, ``/tmp/node`` and ``/tmp/report`` in a temporary directory) and its output compared
line for line: the ready line up to its JSON (ports and paths vary), every other line exactly, and the
exit status ``echo $?`` shows. ``TEE_UPDATE_DOCS=1`` writes the fresh output into the page instead.

The plugin is teesim's static one (``misc.capacity`` read once, as KubeVirt's plugin does): nothing
changes after it registers, so the run is the same every time (the double-pool column's numbers).
It runs once, on the build ``make test`` runs first (the native one): about 45 s.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "device-plugin.md"
MARK = "<!-- generated-by: tests/simulator/test_docs_serve.py (TEE_UPDATE_DOCS=1 rewrites the block below) -->"
READY = "teesim serve: ready {"


def _block(text: str) -> tuple[int, int, list[str]]:
    """(first line, line after the last, lines) of the console block after MARK."""
    lines = text.splitlines()
    start = lines.index(MARK) + 1
    assert lines[start] == "```console", "the generated block must follow its mark"
    end = lines.index("```", start + 1)
    return start + 1, end, lines[start + 1 : end]


def _command(block: list[str]) -> tuple[list[str], int]:
    """The ``$ teesim serve ...`` command (continuation lines joined) and where its output starts."""
    assert block[0].startswith("$ teesim serve ")
    joined, index = block[0][2:], 0
    while joined.endswith("\\"):
        index += 1
        joined = joined[:-1] + block[index].strip()
    return shlex.split(joined), index + 1


def _run(argv: list[str], where: Path) -> tuple[list[str], int]:
    root, report = where / "node", where / "report"
    mapped = [a.replace("/tmp/node", str(root)).replace("/tmp/report", str(report)) for a in argv[1:]]
    mapped = [re.sub(r"^python ", f"{sys.executable} ", a) for a in mapped]
    path = os.pathsep.join(filter(None, [str(REPO / "simulator"), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}
    done = subprocess.run(
        [sys.executable, "-m", "teesim.cli", *mapped], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    said = [line for line in done.stderr.splitlines() if line.startswith(("teesim serve:", "wrote "))]
    out = done.stdout.splitlines() + said
    return [line.replace(str(root), "/tmp/node").replace(str(report), "/tmp/report") for line in out], done.returncode


@pytest.mark.slow
def test_the_worked_serve_example_is_what_its_command_prints():
    text = DOC.read_text(encoding="utf-8")
    first, end, block = _block(text)
    argv, output_at = _command(block)
    echo = next(i for i, line in enumerate(block) if line.startswith("$ echo $?"))
    where = Path(tempfile.mkdtemp(prefix="td-", dir="/tmp"))  # Unix socket paths stay short
    try:
        fresh, status = _run(argv, where)
    finally:
        subprocess.run(["rm", "-rf", str(where)], check=False)
    assert fresh and fresh[0].startswith(READY), fresh
    documented = block[output_at:echo]
    fresh = [documented[0] if documented and documented[0].startswith(READY) else fresh[0], *fresh[1:]]
    if os.environ.get("TEE_UPDATE_DOCS") == "1":
        lines = text.splitlines()
        new_block = block[:output_at] + fresh + [block[echo], str(status)]
        DOC.write_text("\n".join(lines[:first] + new_block + lines[end:]) + "\n", encoding="utf-8")
        return
    assert documented == fresh, "\n".join(["docs differ from a fresh run; TEE_UPDATE_DOCS=1 rewrites it:", *fresh])
    assert block[echo + 1] == str(status)
