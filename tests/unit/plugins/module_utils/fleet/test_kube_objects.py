"""kube_objects: quantities, effective pod requests and node selection, as the API server and scheduler read them."""

from __future__ import annotations

from fractions import Fraction

import pytest
from ansible_collections.confidential.tee.plugins.module_utils.fleet.kube_objects import (
    bound_pods,
    is_extended,
    items,
    parse_count,
    parse_quantity,
    pod_requests,
    selector_matches,
)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("63", 63),
        ("1k", 1000),
        ("1Ki", 1024),
        ("2Mi", 2 * 1024**2),
        ("100m", Fraction(1, 10)),
        ("1.5", Fraction(3, 2)),
        (".5", Fraction(1, 2)),
        ("1e3", 1000),
        ("2E-1", Fraction(1, 5)),
        ("+4", 4),
        ("-4", -4),
        (7, 7),
        (0.25, Fraction(1, 4)),
        (" 5 ", 5),
    ],
)
def test_quantities(text, value):
    assert parse_quantity(text) == (value, None)


@pytest.mark.parametrize("text", ["", "k", "1 k", "1kk", "one", "1Qi", "--1", None, True, [1]])
def test_bad_quantities_say_so(text):
    value, problem = parse_quantity(text)
    assert value is None and problem


@pytest.mark.parametrize(("text", "count"), [("63", 63), ("1k", 1000), ("0", 0)])
def test_counts(text, count):
    assert parse_count(text) == (count, None)


@pytest.mark.parametrize("text", ["100m", "-1", "1.5"])
def test_counts_must_be_whole_and_not_negative(text):
    value, problem = parse_count(text)
    assert value is None and "whole non-negative" in problem


def test_extended_resources():
    assert is_extended("tdx.intel.com/keys") and is_extended("devices.kubevirt.io/tdx")
    assert not is_extended("cpu") and not is_extended("hugepages-2Mi") and not is_extended("kubernetes.io/batch")


def pod(containers=(), init=(), overhead=None, node="n1", phase="Running"):
    spec = {"nodeName": node, "containers": list(containers), "initContainers": list(init)}
    if overhead is not None:
        spec["overhead"] = overhead
    return {"kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}, "spec": spec, "status": {"phase": phase}}


def container(requests=None, limits=None, restart=None):
    result = {"name": "c", "resources": {}}
    if requests is not None:
        result["resources"]["requests"] = requests
    if limits is not None:
        result["resources"]["limits"] = limits
    if restart:
        result["restartPolicy"] = restart
    return result


def test_pod_requests_sum_containers_and_add_overhead():
    p = pod(
        [container({"devices.kubevirt.io/tdx": "1"}), container({"devices.kubevirt.io/tdx": "2"})],
        overhead={"tdx.intel.com/keys": "1", "cpu": "250m"},
    )
    assert pod_requests(p, {"devices.kubevirt.io/tdx", "tdx.intel.com/keys"}) == {
        "devices.kubevirt.io/tdx": 3,
        "tdx.intel.com/keys": 1,
    }


def test_extended_request_defaults_to_the_limit():
    assert pod_requests(pod([container(limits={"devices.kubevirt.io/tdx": "1", "memory": "1Gi"})])) == {
        "devices.kubevirt.io/tdx": 1
    }


def test_init_containers_take_the_maximum_and_sidecars_add_up():
    keys = {"x.example.com/keys"}
    regular = pod([container({"x.example.com/keys": "1"})], init=[container({"x.example.com/keys": "3"})])
    assert pod_requests(regular, keys) == {"x.example.com/keys": 3}
    sidecar = pod(
        [container({"x.example.com/keys": "1"})],
        init=[container({"x.example.com/keys": "2"}, restart="Always"), container({"x.example.com/keys": "2"})],
    )
    # Sidecar 2 runs beside the app (1 + 2 = 3) and beside the later init container (2 + 2 = 4): max 4.
    assert pod_requests(sidecar, keys) == {"x.example.com/keys": 4}


def test_bad_quantities_are_problems_not_exceptions():
    problems = []
    found = pod_requests(pod([container({"devices.kubevirt.io/tdx": "lots"})]), None, problems)
    assert found == {"devices.kubevirt.io/tdx": 0}
    assert problems == ["pod ns/p devices.kubevirt.io/tdx: quantity 'lots' is not a Kubernetes quantity"]


def test_bound_pods_exclude_other_nodes_and_terminated_phases():
    pods = [pod(node="n1"), pod(node="n2"), pod(phase="Succeeded"), pod(phase="Failed"), pod(phase="Pending")]
    assert [p["status"]["phase"] for p in bound_pods(pods, "n1")] == ["Running", "Pending"]


def test_items_of_lists_and_objects():
    node = {"kind": "Node", "metadata": {"name": "a"}}
    assert items({"kind": "List", "items": [node, "junk"]}) == [node]
    assert items([node, 3]) == [node] and items(node) == [node] and items("x") == [] and items(None) == []


def test_selector():
    labels = {"a": "1", "b": "2"}
    assert selector_matches({}, labels) and selector_matches({"a": "1"}, labels)
    assert not selector_matches({"a": "2"}, labels) and not selector_matches({"c": "1"}, labels)
