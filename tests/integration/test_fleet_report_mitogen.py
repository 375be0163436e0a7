"""The fleet playbook under mitogen's strategy makes the same report as under Ansible's own (issue 20).

mitogen is an optional extra (``pip install 'confidential-tee[mitogen]'``, in the dev extra so that this runs in
``make test``). It runs modules in a persistent interpreter per host instead of one process per task, so this
compares what both strategies write for the same simulated fleet, byte for byte apart from timestamps (the report
has none today; any added later must not hide a difference). No timing is asserted here: bench_fleet.py measures.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import yaml
from teesim.fixtures.fleet import build_fleet

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
PLAYBOOK = REPO / "playbooks" / "fleet_report.yml"
ISO_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:?\d\d)?")


def mitogen_strategies() -> str:
    ansible_mitogen = pytest.importorskip(
        "ansible_mitogen", reason="mitogen is not installed (pip install 'confidential-tee[mitogen]')"
    )
    return os.path.join(os.path.dirname(ansible_mitogen.__file__), "plugins", "strategy")


def without_timestamps(value):
    """``value`` with every key that names a time dropped and ISO 8601 times in text replaced."""
    if isinstance(value, dict):
        return {k: without_timestamps(v) for k, v in value.items() if not re.search(r"time|_at$|date", k)}
    if isinstance(value, list):
        return [without_timestamps(v) for v in value]
    return ISO_TIME.sub("<time>", value) if isinstance(value, str) else value


def written_files(directory: Path) -> dict[str, object]:
    files = {}
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        text = path.read_text()
        key = str(path.relative_to(directory))
        files[key] = without_timestamps(json.loads(text) if path.suffix == ".json" else text)
    return files


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    out = tmp_path_factory.mktemp("fleet")
    build_fleet(out, captures=None)
    inventory = yaml.safe_load((out / "inventory.yml").read_text())
    # One node also has its attestation chain checked (play 0), one has lost its root (a failed task).
    inventory["tee_nodes"]["hosts"]["tdx-1"].update(tee_fleet_attestation=True)
    broken = dict(inventory["tee_nodes"]["hosts"]["tdx-2"], tee_host_root=str(out / "gone"), tee_node_name="tdx-9")
    inventory["tee_nodes"]["hosts"]["tdx-9"] = broken
    (out / "inventory.yml").write_text(yaml.safe_dump(inventory))
    return out


def run(cli, fleet: Path, name: str, env: dict[str, str]) -> Path:
    report = fleet / name
    extra = {"tee_fleet_kubernetes_dir": fleet / "kubernetes", "tee_fleet_report_dir": report}
    completed = cli(PLAYBOOK, "-i", str(fleet / "inventory.yml"), extra_vars=extra, env=env)
    assert completed.returncode == 0, completed.stdout[-4000:] + completed.stderr[-4000:]
    return report


def test_mitogen_writes_the_same_report(fleet, ansible_playbook_cli):
    strategies = mitogen_strategies()
    vanilla = run(ansible_playbook_cli, fleet, "vanilla", {})
    mitogen = run(
        ansible_playbook_cli,
        fleet,
        "mitogen",
        {"ANSIBLE_STRATEGY_PLUGINS": strategies, "ANSIBLE_STRATEGY": "mitogen_linear"},
    )
    expected, got = written_files(vanilla), written_files(mitogen)
    assert sorted(got) == sorted(expected) and "report.json" in got
    for name in expected:
        assert got[name] == expected[name], name
    report = expected["report.json"]
    # The same findings, figures and verdicts, and the fleet is what it should be (not two identical failures).
    assert report["summary"]["findings_by_id"]["double_pool"] == 1
    assert report["summary"]["unreachable"] == ["tdx-9"]
    tdx1 = next(node for node in report["nodes"] if node["name"] == "tdx-1")
    assert next(s for s in tdx1["sections"] if s["id"] == "attestation")["verdict"] == "FAIL"
