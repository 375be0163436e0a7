"""fleet_report, fleet_render and prometheus: one report, the same facts in every format, text escaped."""

from __future__ import annotations

import json
import re

import pytest
from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import HostReader
from ansible_collections.confidential.tee.plugins.module_utils.fleet.fleet_render import render_html, render_markdown
from ansible_collections.confidential.tee.plugins.module_utils.fleet.fleet_report import (
    build_report,
    compact_result,
    fleet_host_entries,
    host_facts,
    metrics_file_name,
    node_verdict,
    tee_label,
)
from ansible_collections.confidential.tee.plugins.module_utils.fleet.prometheus import render_metrics
from ansible_collections.confidential.tee.plugins.module_utils.host.host_facts import gather_host_facts
from ansible_collections.confidential.tee.plugins.module_utils.host.preflight import gather_preflight
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families
from teesim.fixtures import k8s_objects as k8s
from teesim.fixtures.fleet import KATA_TDX, RULES, TDX_LABEL
from teesim.kernel.cli import build_node_tree


def result_for(root) -> dict:
    host = HostReader(str(root))
    facts = gather_preflight(host, gather_host_facts(host))
    return {"changed": False, "host": facts}


@pytest.fixture
def two_nodes(tmp_path):
    """A TDX node with a double pool and VMs outside Kubernetes, and a kernel without KVM TDX (not ready)."""
    build_node_tree(tmp_path / "a", charges=[("kubepods.slice", "tdx", 2), ("machine.slice", "tdx", 3)])
    build_node_tree(tmp_path / "b", profile="no-misc", kvm_tdx="absent")
    pools = {"devices.kubevirt.io/tdx": "63", "tdx.intel.com/keys": "63"}
    kube = {
        "nodes": k8s.as_list(
            [
                k8s.node("a", "10.0.0.1", dict(TDX_LABEL), pools, "6.16.0", "Ubuntu"),
                k8s.node("b", "10.0.0.2", {}, {}, "5.10.0", "Debian"),
            ]
        ),
        "pods": [k8s.kata_pod("k0", "a", KATA_TDX), k8s.kata_pod("k1", "a", KATA_TDX)],
        "runtime_classes": [KATA_TDX],
        "node_feature_rules": RULES,
    }
    hosts = [
        {"name": "a", "node": "a", "result": result_for(tmp_path / "a")},
        {"name": "b", "node": "b", "result": result_for(tmp_path / "b")},
        {"name": "c", "node": "c", "result": {"unreachable": True, "msg": "ssh: connection refused"}},
    ]
    return build_report(hosts, kube)


def test_summary(two_nodes):
    summary = two_nodes["summary"]
    assert summary["nodes"] == 3 and summary["ready"] == 1
    assert summary["not_ready"] == ["b", "c"] and summary["unreachable"] == ["c"]
    assert summary["findings_by_id"] == {"double_pool": 1, "external_usage": 1}
    # Node a's preflight passes, but its double pool is critical: no PASS beside "2 critical".
    assert summary["verdicts"] == {"FAIL": 2, "UNKNOWN": 1}
    node_a = two_nodes["nodes"][0]
    assert node_a["preflight_verdict"] == "PASS" and node_a["verdict"] == "FAIL" and node_a["ready"] is True
    node_c = two_nodes["nodes"][2]
    assert node_c["error"] == "unreachable: ssh: connection refused" and node_c["blocking"] == [node_c["error"]]
    assert node_c["verdict"] == node_c["preflight_verdict"] == "UNKNOWN"


def test_no_pass_beside_a_critical_finding_in_any_format(two_nodes):
    markdown = render_markdown(two_nodes)
    row = next(line for line in markdown.splitlines() if line.startswith("| a |"))
    assert row.startswith("| a | FAIL | yes | TDX |") and "2 critical" in row
    assert "### a (preflight PASS)" in markdown
    html = render_html(two_nodes)
    assert re.search(r"<tr><td>a</td><td><span class=\"v FAIL\">FAIL</span></td>", html)


@pytest.mark.parametrize(
    ("preflight", "severities", "verdict"),
    [
        ("PASS", ["critical"], "FAIL"),
        ("PASS", ["warning", "info"], "PASS"),
        ("SKIP", ["critical"], "FAIL"),
        ("FAIL", [], "FAIL"),
        ("UNKNOWN", ["critical"], "UNKNOWN"),
    ],
)
def test_node_verdict(preflight, severities, verdict):
    assert node_verdict(preflight, [{"severity": s} for s in severities]) == verdict


def test_every_drift_fix_names_the_collections_own_remedy(two_nodes):
    for finding in two_nodes["nodes"][0]["findings"]:
        assert "With confidential.tee: " in finding["fix"], finding["id"]
    double = next(f for f in two_nodes["nodes"][0]["findings"] if f["id"] == "double_pool")
    assert "confidential.tee.cluster with tee_key_pool_mode set for a: kernel (Kata's" in double["fix"]
    assert "or kubevirt (Kata's RuntimeClass overhead then requests KubeVirt's devices.kubevirt.io/tdx" in double["fix"]


def test_a_gpu_host_without_a_cpu_tee_is_not_labelled_tdx():
    failed_flag = {"sections": [{"id": "tdx", "checks": [{"id": "tdx.cpu_flag", "verdict": "FAIL"}]}]}
    gpu = {"cc_capable": True}
    intel = {"tee_vendor": "intel"}
    assert tee_label(intel, dict(failed_flag, technology="TDX"), gpu) == "NVIDIA GPU CC; no CPU TEE"
    passed = {"technology": "TDX", "sections": [{"id": "tdx", "checks": [{"verdict": "PASS"}]}]}
    assert tee_label(intel, passed, gpu) == "TDX + NVIDIA GPU CC"
    assert tee_label(intel, dict(failed_flag, technology="TDX"), None) == "TDX"


@pytest.mark.parametrize(
    ("result", "why"),
    [
        (None, "no result: the host was unreachable or the task did not run"),
        ({"failed": True, "msg": "host_root /x is not a directory"}, "tee_host_info failed: host_root /x is not"),
        ({"skipped": True}, "tee_host_info was skipped"),
        ({"host": {}}, "the result has no host.preflight: run tee_host_info with preflight: true"),
    ],
)
def test_host_results_that_give_no_facts(result, why):
    facts, error = host_facts(result)
    assert facts is None and error.startswith(why)


def test_markdown_has_the_table_findings_and_fixes(two_nodes):
    text = render_markdown(two_nodes)
    assert "**3 nodes: 1 ready, 2 not ready (b, c). 2 drift findings, 2 critical.**" in text
    assert "| a | FAIL | yes | TDX | 6.16.0-teesim | tdx 5/63 |" in text
    assert "### a: double pool (tdx, critical)" in text and "**Fix:** keep one pool for tdx" in text
    assert "### a: keys used outside Kubernetes (tdx, critical)" in text and "machine.slice (3)" in text
    assert "- **tdx.kvm** /sys/module/kvm_intel/parameters/tdx is missing" in text
    assert "- unreachable: ssh: connection refused" in text


def test_html_is_self_contained_and_escapes_what_hosts_say(two_nodes):
    two_nodes["nodes"][2]["name"] = "<script>alert(1)</script>"
    two_nodes["title"] = 'fleet "prod" & <friends>'
    page = render_html(two_nodes)
    assert "<script" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<title>fleet &quot;prod&quot; &amp; &lt;friends&gt;</title>" in page
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)
    assert page.count("<svg") == 1  # node a has keys; b and c have none
    assert 'aria-label="tdx key pools on a"' in page


def test_metrics_parse_and_leave_unknowns_out(two_nodes):
    text = render_metrics(two_nodes["nodes"])
    families = {family.name: family for family in text_string_to_metric_families(text)}
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in families.values()
        for sample in family.samples
    }
    assert samples[("tee_keys_capacity", (("node", "a"), ("resource", "tdx"), ("source", "misc")))] == 63
    assert samples[("tee_keys_in_use", (("node", "a"), ("resource", "tdx")))] == 5
    assert samples[("tee_keys_free", (("node", "a"), ("resource", "tdx")))] == 58
    assert samples[("tee_keys_outside_kubernetes", (("node", "a"), ("resource", "tdx")))] == 3
    assert samples[("tee_keys_overcommit_worst_case", (("node", "a"), ("resource", "tdx")))] == 63
    assert samples[("tee_misc_events_total", (("event", "max"), ("node", "a"), ("resource", "tdx")))] == 0
    assert samples[("tee_node_reachable", (("node", "c"),))] == 0
    assert samples[("tee_preflight_ready", (("node", "b"),))] == 0
    assert families["tee_misc_events"].type == "counter"
    # Node b has no misc controller: no capacity sample at all rather than a 0.
    assert not any(name == "tee_keys_capacity" and ("node", "b") in labels for name, labels in samples)


def test_metric_label_values_are_escaped():
    node = {"node": 'we"ird\\node\n', "reachable": False, "findings": [], "pools": {}}
    text = render_metrics([node])
    assert 'tee_node_reachable{node="we\\"ird\\\\node\\n"} 0' in text
    (family,) = text_string_to_metric_families(text)
    assert family.samples[0].labels == {"node": 'we"ird\\node\n'}


def test_report_is_json_and_deterministic(two_nodes, tmp_path):
    assert json.loads(json.dumps(two_nodes)) == two_nodes
    assert render_markdown(two_nodes) == render_markdown(json.loads(json.dumps(two_nodes)))


def test_without_kubernetes_objects_drift_is_not_checked(tmp_path):
    build_node_tree(tmp_path / "a")
    report = build_report([{"name": "a", "node": "a", "result": result_for(tmp_path / "a")}])
    assert report["kubernetes"] is False and report["summary"]["findings"] == 0
    assert report["nodes"][0]["drift_reason"].startswith("no Kubernetes objects given")
    assert "Drift not checked: no Kubernetes objects." in render_markdown(report)


def test_compact_result_keeps_what_the_report_reads(tmp_path):
    build_node_tree(tmp_path / "a", usage={"tdx": 4})
    full = result_for(tmp_path / "a")
    full["invocation"] = {"module_args": {"host_root": str(tmp_path / "a")}}
    compact = compact_result(full)
    assert set(compact) == {"host"} and compact["host"]["preflight"] == full["host"]["preflight"]
    assert len(json.dumps(compact)) < len(json.dumps(full)) * 0.7
    assert compact_result(compact) == compact
    hosts = [{"name": "a", "node": "a", "result": full}]
    assert build_report(hosts) == build_report([dict(hosts[0], result=compact)])


def test_a_hosts_problems_are_read_under_both_names(tmp_path):
    """tee_host_info returns its problem list as problems (warnings until release 0.3.0): a result registered by
    an older release, with warnings only, reports the same."""
    build_node_tree(tmp_path / "a")
    result = result_for(tmp_path / "a")
    result["host"]["problems"] = [{"path": "/proc/x", "problem": "unreadable"}]
    old = {"changed": False, "host": {k: v for k, v in result["host"].items() if k != "problems"}}
    old["host"]["warnings"] = result["host"]["problems"]
    del result["host"]["warnings"]
    for registered in (result, old):
        report = build_report([{"name": "a", "node": "a", "result": registered}])
        assert report["nodes"][0]["warnings"] == ["unreadable"]


def test_a_preflight_registered_with_the_old_check_names_reports_the_same(tmp_path):
    """Until release 0.3.0 a result registered by 0.1.0 (checks with id, verdict, detail, remediation only) may be
    given: its failures are reported as the check records' are."""
    build_node_tree(tmp_path / "a", profile="no-misc", kvm_tdx="absent")
    result = result_for(tmp_path / "a")
    old = json.loads(json.dumps(result))
    for section in old["host"]["preflight"]["sections"]:
        section["checks"] = [
            {k: c[k] for k in ("id", "title", "verdict", "detail", "remediation")} for c in section["checks"]
        ]
    reports = [build_report([{"name": "a", "node": "a", "result": registered}]) for registered in (result, old)]
    assert "Fix:" in render_markdown(reports[0])
    assert render_markdown(reports[1]) == render_markdown(reports[0]) and render_html(reports[1]) == render_html(
        reports[0]
    )


def test_fleet_host_entries_for_the_filter():
    """(The filter plugin itself imports controller-side Ansible, which changes how module warnings are recorded
    for every later test in the process; the integration test runs it through ansible-playbook.)"""
    failed = {"failed": True, "msg": "host_root /x is not a directory", "invocation": {"module_args": {}}}
    hostvars = {"a": {"tee_node_name": "node-a", "r": failed}, "b": {}}
    assert fleet_host_entries(["a", "b", "c"], hostvars, "r") == [
        {"name": "a", "node": "node-a", "result": '{"failed": true, "msg": "host_root /x is not a directory"}'},
        {"name": "b", "node": "b", "result": None},
        {"name": "c", "node": "c", "result": None},
    ]
    for names in ("a,b", None, 3):
        with pytest.raises(TypeError, match="expects a list of host names"):
            fleet_host_entries(names, {}, "r")


@pytest.mark.parametrize(
    ("node", "expected"),
    [("tdx-1", "tdx-1.prom"), ("node.example.com", "node.example.com.prom"), ("a" * 250, "a" * 250 + ".prom")],
)
def test_a_valid_node_name_that_fits_is_its_own_metrics_file_name(node, expected):
    assert metrics_file_name(node) == expected


@given(st.lists(st.text(min_size=1, max_size=300), min_size=2, max_size=6, unique=True))
@settings(max_examples=200, deadline=None)
def test_metrics_file_names_are_distinct_valid_path_components(nodes):
    names = [metrics_file_name(node) for node in nodes]
    assert len(set(names)) == len(names)
    for name in names:
        assert "/" not in name and "\0" not in name and name not in (".", "..")
        assert 0 < len(name.encode()) <= 255 and name.endswith(".prom")
