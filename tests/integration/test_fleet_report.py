"""The fleet report end to end: teesim's mixed fleet, the real playbooks/fleet_report.yml through ansible-playbook,
and the HTML page in a real headless chromium (no console errors, a screenshot that shows the report)."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from teesim.fixtures.fleet import build_fleet

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
PLAYBOOK = REPO / "playbooks" / "fleet_report.yml"
JSON = {"ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json"}


def run_playbook(cli, fleet: Path, report: Path, *args: str):
    extra = {"tee_fleet_kubernetes_dir": fleet / "kubernetes", "tee_fleet_report_dir": report}
    completed = cli(PLAYBOOK, "-i", str(fleet / "inventory.yml"), *args, extra_vars=extra, env=JSON)
    assert completed.returncode == 0, completed.stdout[-4000:] + completed.stderr[-4000:]
    return json.loads(completed.stdout)


def task_result(output: dict, name: str, host: str = "localhost") -> dict:
    return next(t["hosts"][host] for p in output["plays"] for t in p["tasks"] if t["task"]["name"] == name)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory, ansible_playbook_cli):
    """The mixed fleet (with the H100 capture teesim ships) plus a host whose root is gone."""
    out = tmp_path_factory.mktemp("fleet")
    build_fleet(out)
    inventory = yaml.safe_load((out / "inventory.yml").read_text())
    broken = dict(inventory["tee_nodes"]["hosts"]["tdx-2"], tee_host_root=str(out / "gone"), tee_node_name="tdx-9")
    inventory["tee_nodes"]["hosts"]["tdx-9"] = broken
    # One TDX node also gets its attestation chain checked (the simulated host has no QGS: the chain fails).
    inventory["tee_nodes"]["hosts"]["tdx-1"].update(
        tee_fleet_attestation=True, tee_fleet_attestation_args={"dcap_version": "1.26", "consumers": ["kubevirt"]}
    )
    (out / "inventory.yml").write_text(yaml.safe_dump(inventory))
    output = run_playbook(ansible_playbook_cli, out, out / "report")
    return out, output


def test_report_shows_double_pool_external_usage_and_not_ready_nodes_with_fixes(fleet):
    out, output = fleet
    written = task_result(output, "Write the report")
    assert written["changed"] is True
    report = json.loads((out / "report" / "report.json").read_text())
    summary = report["summary"]
    assert summary["findings_by_id"]["double_pool"] == 1 and summary["findings_by_id"]["external_usage"] == 1
    assert {"stale_advertiser", "nfd_sev_prefix", "runtimeclass_unadvertised", "sev_es_uncounted"} <= set(
        summary["findings_by_id"]
    )
    assert {"tdx-nomisc", "tdx-9"} <= set(summary["not_ready"]) and summary["unreachable"] == ["tdx-9"]
    broken = next(n for n in report["nodes"] if n["name"] == "tdx-9")
    assert broken["verdict"] == "UNKNOWN" and "is not a directory" in broken["error"]
    markdown = (out / "report" / "report.md").read_text()
    assert "### tdx-1: double pool (tdx, critical)" in markdown
    assert "### tdx-1: keys used outside Kubernetes (tdx, critical)" in markdown and "machine.slice (6)" in markdown
    assert markdown.count("**Fix:**") == summary["findings"]
    h100 = next(n for n in report["nodes"] if n["name"] == "gpu-h100")
    assert h100["ready"] is False and h100["gpu"]["cc_state"] == "OFF"
    assert h100["gpu"]["ready_state"] == "not-ready"


def test_verdicts_labels_and_fixes_say_what_they_mean(fleet):
    """No PASS beside a critical finding, no TDX label on the GPU host, no hint cut short, every fix with the
    collection's own remedy."""
    out, _ = fleet
    report = json.loads((out / "report" / "report.json").read_text())
    nodes = {n["name"]: n for n in report["nodes"]}
    for node in nodes.values():
        if any(f["severity"] == "critical" for f in node["findings"]):
            assert node["verdict"] == "FAIL", node["name"]
    assert nodes["snp-1"]["preflight_verdict"] == "PASS" and nodes["snp-1"]["verdict"] == "FAIL"
    assert nodes["gpu-h100"]["technology"] == "NVIDIA GPU CC; no CPU TEE"
    markdown = (out / "report" / "report.md").read_text()
    assert "| snp-1 | FAIL | yes | SEV-SNP |" in markdown
    assert "| gpu-h100 | FAIL | **no** | NVIDIA GPU CC; no CPU TEE |" in markdown
    for node in nodes.values():  # every detail and fix whole in the preflight table, however long
        table = " ".join(" ".join(node["table"]).split())
        for check in (c for section in node["sections"] for c in section["checks"]):
            for text in (check["detail"], check["remediation"] or ""):
                assert " ".join(text.split()) in table, (node["name"], check["id"])
    for finding in report["fleet_findings"] + [f for n in nodes.values() for f in n["findings"]]:
        assert "With confidential.tee: " in finding["fix"] and "confidential.tee." in finding["fix"], finding["id"]


def test_attestation_chain_is_reported_where_it_was_checked(fleet):
    out, _ = fleet
    report = json.loads((out / "report" / "report.json").read_text())
    sections = {node["name"]: {s["id"]: s for s in node["sections"]} for node in report["nodes"] if node["sections"]}
    chain = sections["tdx-1"]["attestation"]
    assert chain["verdict"] == "FAIL" and chain["checks"][0]["id"] == "attestation.chain"
    assert chain["checks"][0]["remediation"]
    assert sections["tdx-2"]["attestation"]["verdict"] == "SKIP"
    assert "tdx_attestation_check" in sections["tdx-2"]["attestation"]["reason"]


def test_metrics_for_every_node(fleet):
    out, _ = fleet
    names = {family.name for family in text_string_to_metric_families((out / "report" / "tee-fleet.prom").read_text())}
    assert {"tee_keys_capacity", "tee_keys_in_use", "tee_keys_peak", "tee_misc_events", "tee_drift_findings"} <= names
    node = (out / "report" / "textfile" / "tdx-1.prom").read_text()
    assert 'tee_keys_in_use{node="tdx-1",resource="tdx"} 20' in node and 'node="snp-1"' not in node


def test_second_run_changes_nothing_and_check_mode_writes_nothing(fleet, ansible_playbook_cli):
    out, _ = fleet
    again = run_playbook(ansible_playbook_cli, out, out / "report")
    assert task_result(again, "Write the report")["changed"] is False
    planned = run_playbook(ansible_playbook_cli, out, out / "planned", "--check")
    assert task_result(planned, "Write the report")["changed"] is True
    assert not (out / "planned").exists()


def test_html_report_renders_in_chromium_without_console_errors(fleet, browser, tmp_path):
    out, _ = fleet
    page = out / "report" / "report.html"
    report = json.loads((out / "report" / "report.json").read_text())
    browser.open(page)
    assert browser.problems == []
    assert browser.evaluate("document.querySelectorAll('table tbody tr').length") == len(report["nodes"])
    charts = sum(1 for node in report["nodes"] for _ in node["pools"])
    assert browser.evaluate("document.querySelectorAll('svg rect').length") >= charts
    assert browser.evaluate("document.querySelectorAll('.fix').length") >= report["summary"]["findings"]
    png = browser.screenshot()
    (tmp_path / "report.png").write_bytes(png)
    image = pytest.importorskip("matplotlib.image").imread(io.BytesIO(png), format="png")
    height, width = image.shape[:2]
    assert width >= 1000 and height > 1000  # the whole page, not an empty viewport
    assert image.std() > 0.05  # not a blank page
    shutil.copy(tmp_path / "report.png", out / "report" / "screenshot.png")


def test_the_console_check_catches_errors(browser, tmp_path):
    """A page with a failing script must be noticed, or the test above could never fail."""
    page = tmp_path / "broken.html"
    page.write_text("<!DOCTYPE html><html><body><script>console.error('bad'); undefinedCall();</script></body></html>")
    browser.open(page)
    browser.evaluate("1")
    assert any("bad" in problem for problem in browser.problems)
    assert any("undefinedCall" in problem for problem in browser.problems)


def test_each_node_installs_its_own_metrics_file_named_by_the_module(fleet, ansible_playbook_cli, tmp_path):
    """Play 3 copies the file the module named for the node (tee_fleet_report.textfiles), no name rule in Jinja."""
    out, _ = fleet
    inventory = yaml.safe_load((out / "inventory.yml").read_text())
    for host, variables in inventory["tee_nodes"]["hosts"].items():
        variables["tee_fleet_textfile_dir"] = str(tmp_path / "nodes" / host)
        (tmp_path / "nodes" / host).mkdir(parents=True)
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    extra = {"tee_fleet_kubernetes_dir": out / "kubernetes", "tee_fleet_report_dir": tmp_path / "report"}
    completed = ansible_playbook_cli(PLAYBOOK, "-i", str(tmp_path / "inventory.yml"), extra_vars=extra, env=JSON)
    assert completed.returncode == 0, completed.stdout[-4000:] + completed.stderr[-4000:]
    for host, variables in inventory["tee_nodes"]["hosts"].items():
        node = variables.get("tee_node_name", host)
        metrics = (tmp_path / "nodes" / host / "confidential_tee.prom").read_text()
        assert f'node="{node}"' in metrics and all(f'node="{n}"' not in metrics for n in {"tdx-1", "snp-1"} - {node})
