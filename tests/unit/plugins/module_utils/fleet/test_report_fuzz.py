"""The fleet report on corrupted Kubernetes objects: a problem naming the object and field, never a crash or a hang.

The simulated fleet's objects (valid: the cluster roles' tests check the same builders against the real schemas)
are corrupted one field at a time, anywhere, with values of every JSON type and hostile quantities; the report,
its HTML, Markdown and metrics must still be produced, each in bounded time.
"""

from __future__ import annotations

import copy
import html
import re
import time

import pytest
from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import HostReader
from ansible_collections.confidential.tee.plugins.module_utils.fleet.fleet_render import render_html, render_markdown
from ansible_collections.confidential.tee.plugins.module_utils.fleet.fleet_report import all_findings, build_report
from ansible_collections.confidential.tee.plugins.module_utils.fleet.prometheus import render_metrics
from ansible_collections.confidential.tee.plugins.module_utils.fleet.report_run import read_kubernetes_dir
from ansible_collections.confidential.tee.plugins.module_utils.host.host_facts import gather_host_facts
from ansible_collections.confidential.tee.plugins.module_utils.host.preflight import gather_preflight
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from teesim.fixtures.fleet import build_fleet

HOSTILE = [None, 0, -1, 1.5, float("nan"), float("inf"), True, "", "x", "1e", "1Ex", "9" * 5000, "1e1000000000"]
HOSTILE += [[], {}, [1], {"a": 1}, "<script>alert(1)</script>", "a\nb"]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    out = tmp_path_factory.mktemp("fleet")
    summary = build_fleet(out, captures=None)
    hosts = []
    for name in summary["nodes"]:
        root = str(out / "nodes" / name)
        host = HostReader(root)
        hosts.append({"name": name, "node": name, "result": {"host": gather_preflight(host, gather_host_facts(host))}})
    objects, _problems = read_kubernetes_dir(str(out / "kubernetes"))
    return hosts, objects


def _paths(value, path=()):
    yield path
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _paths(child, (*path, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from _paths(child, (*path, index))


def _set(document, path, value):
    for key in path[:-1]:
        document = document[key]
    document[path[-1]] = value


def report_everything(hosts, objects) -> dict:
    report = build_report(hosts, objects)
    render_html(report), render_markdown(report), render_metrics(report["nodes"])
    return report


@given(data=st.data())
@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_any_field_corrupted_gives_a_report(fleet, data):
    hosts, objects = fleet
    paths = [p for p in _paths(objects) if p and "managedFields" not in p]
    corrupted = copy.deepcopy(objects)
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from([p for p in _paths(corrupted) if p and "managedFields" not in p] or paths))
        _set(corrupted, path, copy.deepcopy(data.draw(st.sampled_from(HOSTILE))))
    started = time.monotonic()
    report_everything(hosts, corrupted)
    # Bounded: a 10-digit-exponent quantity must not be expanded (seconds here would mean it was).
    assert time.monotonic() - started < 30


@pytest.mark.parametrize("value", [5, True, "rules", {"a": 1}], ids=repr)
def test_a_rule_list_of_the_wrong_type_is_a_problem_naming_the_object_and_field(fleet, value):
    hosts, objects = fleet
    corrupted = copy.deepcopy(objects)
    rule = corrupted["node_feature_rules"]["items"][0]
    rule["spec"]["rules"] = value
    problems = report_everything(hosts, corrupted)["problems"]
    assert any(f"NodeFeatureRule {rule['metadata']['name']} spec.rules: must be a list" in p for p in problems)


def test_malformed_rule_entries_and_values_are_problems(fleet):
    hosts, objects = fleet
    corrupted = copy.deepcopy(objects)
    rules = corrupted["node_feature_rules"]["items"][0]["spec"]["rules"]
    rules.append(7)
    rules.append({"name": "x", "extendedResources": ["tdx.intel.com/keys"]})
    rules.append({"name": "y", "extendedResources": {"tdx.intel.com/keys": 63}})
    problems = report_everything(hosts, corrupted)["problems"]
    assert any(f"spec.rules[{len(rules) - 3}]: must be an object, got number 7" in p for p in problems)
    assert any(".extendedResources: must be an object, got a list" in p for p in problems)
    assert any(".extendedResources[tdx.intel.com/keys]: must be a string, got number 63" in p for p in problems)


def test_two_nodes_of_one_name_are_reported(fleet):
    hosts, objects = fleet
    corrupted = copy.deepcopy(objects)
    nodes = corrupted["nodes"]["items"]
    nodes.append(copy.deepcopy(nodes[0]))
    nodes.append({"metadata": {"name": 5}})
    problems = report_everything(hosts, corrupted)["problems"]
    assert any(f"Node {nodes[0]['metadata']['name']} appears 2 times" in p for p in problems)
    assert any("Node without a metadata.name" in p for p in problems)


def test_every_problem_shows_in_the_html_and_markdown_reports(fleet):
    hosts, objects = fleet
    corrupted = copy.deepcopy(objects)
    corrupted["node_feature_rules"]["items"][0]["spec"]["rules"] = 5
    corrupted["nodes"]["items"][0]["status"]["capacity"]["tdx.intel.com/keys"] = "1Ex"
    report = build_report(hosts, corrupted)
    problems = report["problems"] + [p for node in report["nodes"] for p in node["problems"]]
    assert len(problems) >= 2
    # As a reader sees them: Markdown's backslash escapes and HTML's entities undone.
    markdown = re.sub(r"\\(.)", r"\1", render_markdown(report))
    page = html.unescape(render_html(report))
    for problem in problems:
        assert problem in markdown and problem in page


def test_a_fleet_finding_stays_when_none_of_its_nodes_is_in_the_inventory(fleet):
    """A RuntimeClass whose overhead nothing advertises concerns nodes outside the inventory: still reported."""
    hosts, objects = fleet
    full = build_report(hosts, objects)
    unadvertised = [f for f in full["fleet_findings"] if f["id"] == "runtimeclass_unadvertised"]
    assert unadvertised
    landing = set(unadvertised[0]["numbers"]["nodes_it_can_land_on"])
    others = [h for h in hosts if h["node"] not in landing]
    report = build_report(others, objects)
    key = (unadvertised[0]["id"], unadvertised[0]["resource"], unadvertised[0]["numbers"]["runtime_class"])

    def same(finding):
        return (finding["id"], finding["resource"], finding["numbers"].get("runtime_class")) == key

    kept = [f for f in all_findings(report["nodes"], report["fleet_findings"]) if same(f)]
    assert [f["node"] for f in kept] == [None]
    title = unadvertised[0]["title"]
    assert title in render_markdown(report) and title in render_html(report)
    # With its nodes in the inventory it is counted once per node, not once more for the fleet.
    counted = [f for f in all_findings(full["nodes"], full["fleet_findings"]) if same(f)]
    assert sorted(f["node"] for f in counted) == sorted(landing)
