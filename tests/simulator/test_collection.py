"""teesim._collection imports the collection's module_utils, installed or straight from the checkout."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import teesim._collection as collection

SIMULATOR = Path(__file__).resolve().parents[2] / "simulator"

PROBE = """
import json, sys
import teesim._collection as collection
reader = collection.collection_module("plugins.module_utils.common.host_reader")
print(json.dumps({
    "file": collection.misc_cgroup.__file__,
    "parsed": collection.parse_misc_text("tdx 3\\n").values,
    "reader": reader.__name__,
    "collections_on_path": [p for p in sys.path if p.endswith(".build/collections")],
}))
"""


def test_uses_the_collections_parser_file() -> None:
    assert collection.misc_cgroup.__file__.endswith("plugins/module_utils/host/misc_cgroup.py")
    assert collection.parse_misc_text("tdx 3\n").values == {"tdx": 3}


def test_falls_back_to_the_checkout_without_the_collection_on_sys_path(tmp_path: Path) -> None:
    # A fresh interpreter that sees only simulator/: the ansible bundle's ansible_collections namespace may
    # exist in site-packages, confidential.tee does not; the checkout must serve, dependencies included.
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        env={"PYTHONPATH": str(SIMULATOR), "PATH": "/usr/bin:/bin"},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    import json

    seen = json.loads(done.stdout)
    assert seen["collections_on_path"] == []
    assert Path(seen["file"]).resolve() == (SIMULATOR.parent / "plugins/module_utils/host/misc_cgroup.py").resolve()
    assert seen["parsed"] == {"tdx": 3}
    assert seen["reader"] == "ansible_collections.confidential.tee.plugins.module_utils.common.host_reader"
