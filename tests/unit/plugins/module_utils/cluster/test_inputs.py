"""inputs: the cluster playbook's inventory checked as a whole, every message naming the variable and the node."""

from __future__ import annotations

import os

import pytest
from ansible_collections.confidential.tee.plugins.module_utils.cluster import inputs


def test_a_good_inventory_has_no_problems():
    nodes = {"tdx-1": {"tee_node_consumers": ["kata", "kubevirt"], "tee_node_gpu": "yes", "tee_cpu_vendor": "intel"}}
    assert inputs.input_problems({"tee_output": "manifests", "kubevirt_cc_version": "v1.9.0"}, nodes) == []


@pytest.mark.parametrize(
    ("node", "expected"),
    [
        ({"tee_node_gpu": "maybe"}, "tee_node_gpu must be true or false, got 'maybe' for node n1"),
        ({"tee_node_gpu": 2}, "tee_node_gpu must be true or false, got 2 for node n1"),
        ({"tee_node_consumers": "kata"}, "tee_node_consumers must be a YAML list such as [kata, kubevirt]"),
        ({"tee_node_consumers": {"kata": 1}}, "tee_node_consumers must be a list such as [kata, kubevirt], got dict"),
        ({"tee_key_pool_mode": ["nfd"]}, "tee_key_pool_mode must be a string (one of auto, kubevirt, nfd, kernel), got a list"),
        ({"tee_cpu_vendor": "arm"}, "tee_cpu_vendor must be one of auto, intel, amd, got 'arm' for node n1"),
        ({"tee_k8s_node_name": "a-.b"}, "tee_k8s_node_name 'a-.b' is not a Kubernetes node name (for node n1 (a-.b))"),
        ({"tee_host_root": ""}, "tee_host_root must be a non-empty path for node n1"),
        ({"tee_kubernetes_version": 1.33}, "tee_kubernetes_version must be a version such as v1.9.0, got 1.33"),
    ],
)
def test_each_wrong_per_node_variable_is_named_with_its_node(node, expected):
    problems = inputs.input_problems({}, {"n1": node})
    assert len(problems) == 1 and problems[0].startswith(expected), problems


def test_an_inventory_name_that_is_no_node_name_asks_for_tee_k8s_node_name():
    (problem,) = inputs.input_problems({}, {"TDX_1": {}})
    assert problem.startswith("the inventory name (no tee_k8s_node_name) 'TDX_1' is not a Kubernetes node name")


def test_two_hosts_with_one_node_name_and_an_empty_group():
    assert (
        "nodes a and b have one Kubernetes node name n"
        in inputs.input_problems({}, {"a": {"tee_k8s_node_name": "n"}, "b": {"tee_k8s_node_name": "n"}})[0]
    )
    assert "must list at least one node" in inputs.input_problems({}, {})[0]


@pytest.mark.parametrize("value", ["", "   ", [], ["a"], {"a": 1}, 7, None, "a\0b"])
def test_a_manifest_dir_that_is_no_path_is_refused(value):
    assert inputs.input_problems({"tee_manifest_dir": value}, {"n": {}})[0].startswith("tee_manifest_dir must be")


def test_a_relative_manifest_dir_resolves_against_the_given_cwd():
    assert inputs.resolve_output_dir("out/../gitops", "/srv/ops") == "/srv/ops/gitops"
    assert inputs.resolve_output_dir("/srv/x/", "/srv/ops") == "/srv/x"
    assert inputs.resolve_output_dir(None, "/srv/ops") == "/srv/ops/manifests"
    assert inputs.resolve_output_dir("~/m", "/w") == os.path.expanduser("~/m")
    with pytest.raises(ValueError, match="tee_manifest_dir must be a non-empty path string"):
        inputs.resolve_output_dir("", "/w")


@pytest.mark.parametrize("value", ["var/run/tdx-qgs/qgs.socket", "", ["/a"], 7, "/a\0b"])
def test_a_qgs_socket_path_that_is_not_absolute_is_named_cluster_wide_and_per_node(value):
    (wide,) = inputs.input_problems({"kubevirt_cc_qgs_socket_path": value}, {"n1": {}})
    assert wide.startswith("kubevirt_cc_qgs_socket_path must be an absolute path on the nodes, such as /var/run/")
    (per_node,) = inputs.input_problems({}, {"n1": {"kubevirt_cc_qgs_socket_path": value}})
    assert per_node.startswith("kubevirt_cc_qgs_socket_path must be an absolute path") and "for node n1" in per_node


@pytest.mark.parametrize(
    ("host_vars", "expected"),
    [
        # The inventory's vendor wins; the facts still give qgs and sev_asids.
        (
            {"tee_cpu_vendor": "amd", "tee_host": {"tee_vendor": "intel", "qgs": {"present": True}, "sev_asids": 9}},
            {"vendor": "amd", "qgs": {"present": True}, "sev_asids": 9},
        ),
        ({"tee_cpu_vendor": "auto", "tee_host": {"tee_vendor": "intel"}}, {"vendor": "intel"}),
        ({"tee_host": {"tee_vendor": "amd"}}, {"vendor": "amd"}),
        # Facts off, or tee_host_info found no TEE vendor: unknown, refused by name by the playbook.
        ({}, {"vendor": "unknown", "qgs": None, "sev_asids": None}),
        ({"tee_host": {"tee_vendor": None}}, {"vendor": "unknown"}),
        ({"tee_host": "not a mapping"}, {"vendor": "unknown", "qgs": None}),
    ],
)
def test_cluster_node_reads_the_vendor_from_the_inventory_then_the_facts(host_vars, expected):
    node = inputs.cluster_node("n1", host_vars)
    assert {key: node[key] for key in expected} == expected


def test_cluster_node_defaults_and_the_kubernetes_name():
    assert inputs.cluster_node("n1", {"tee_cpu_vendor": "intel"}) == {
        "name": "n1",
        "vendor": "intel",
        "consumers": ["kata"],
        "mode": "auto",
        "qgs": None,
        "sev_asids": None,
    }
    node = inputs.cluster_node("n1", {"tee_k8s_node_name": "worker-1", "tee_node_consumers": ["kubevirt"]})
    assert (node["name"], node["consumers"]) == ("worker-1", ["kubevirt"])


def test_cluster_node_hands_on_plain_strings():
    class Tagged(str):  # ansible-core 2.19 tags inventory strings with a str subclass
        pass

    node = inputs.cluster_node("n1", {"tee_cpu_vendor": Tagged("intel"), "tee_node_consumers": [Tagged("kata")]})
    assert node["vendor"] == "intel" and type(node["vendor"]) is str
    assert [type(c) for c in node["consumers"]] == [str] and type(node["name"]) is str


def test_unfinished_nodes_reads_only_the_flags_in_the_playbooks_order():
    stored = {
        "gpu-ok": {"tee_cluster_node_done": True, "tee_cluster_host_facts": {"changed": False}},
        "gpu-failed": {"tee_cluster_host_facts": {"changed": False}},
        "facts-failed": {"tee_cluster_host_facts": {"failed": True, "msg": "no /sys"}},
        "unreachable": {"tee_cluster_host_facts": {"unreachable": True}},
        "never-ran": {},
        "skipped": {"tee_cluster_host_facts": {"skipped": True}},
    }
    found = inputs.unfinished_nodes(["gpu-ok", "gpu-failed"], list(stored), lambda host: stored[host])
    assert found == ["gpu-failed", "facts-failed", "never-ran", "unreachable"]
    assert inputs.unfinished_nodes([], [], stored.get) == []
