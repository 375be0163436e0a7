"""kube_objects: quantities, effective pod requests and node selection, as the API server and scheduler read them."""

from __future__ import annotations

from ansible_collections.confidential.tee.plugins.module_utils.fleet.kube_objects import (
    bound_pods,
    is_extended,
    items,
    object_ref,
    pod_requests,
    pods_by_node,
    resource_list,
    selector_matches,
)


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


def test_bad_quantities_are_problems_naming_object_and_field_and_unknown_not_zero():
    problems = []
    bad = pod(
        [container({"devices.kubevirt.io/tdx": "1"}), container(limits={"devices.kubevirt.io/tdx": "lots"})],
        init=[container({"x.example.com/keys": "1500m"})],
        overhead={"tdx.intel.com/keys": "1e"},
    )
    found = pod_requests(bad, None, problems)
    assert found == {"devices.kubevirt.io/tdx": None, "x.example.com/keys": None, "tdx.intel.com/keys": None}
    assert problems == [
        "Pod ns/p spec.containers[1].resources.limits[devices.kubevirt.io/tdx]: 'lots' is not a quantity: "
        "expected a number with an optional SI suffix",
        "Pod ns/p spec.initContainers[0].resources.requests[x.example.com/keys]: '1500m' is not a whole number "
        "(extended resources are counts)",
        "Pod ns/p spec.overhead[tdx.intel.com/keys]: '1e' has an unknown suffix 'e'",
    ]


def test_resource_lists_read_extended_resources_or_the_names_asked_for():
    mapping = {"cpu": "250m", "memory": "1Gi", "tdx.intel.com/keys": "63", "example.com/x": 1e400}
    problems = []
    assert resource_list(mapping, None, problems, "Node n status.capacity") == {
        "tdx.intel.com/keys": 63,
        "example.com/x": None,
    }
    assert problems == [
        "Node n status.capacity[example.com/x]: the JSON number inf is not a finite number (a number too large "
        "for a float, such as 1e400, or NaN): write quantities as strings"
    ]
    assert resource_list(mapping, {"memory"}, [], "") == {"memory": 1024**3}


def test_object_ref():
    assert object_ref(pod()) == "Pod ns/p"
    assert object_ref({"metadata": {"name": "n1"}}, "Node") == "Node n1"
    assert object_ref({"kind": "RuntimeClass", "metadata": {}}) == "RuntimeClass (no name)"


def test_bound_pods_exclude_other_nodes_and_terminated_phases():
    pods = [pod(node="n1"), pod(node="n2"), pod(phase="Succeeded"), pod(phase="Failed"), pod(phase="Pending")]
    assert [p["status"]["phase"] for p in bound_pods(pods, "n1")] == ["Running", "Pending"]


def test_pods_by_node_is_bound_pods_of_every_node_in_one_pass():
    pods = [pod(node="n1"), pod(node="n2"), pod(phase="Succeeded"), pod(node="n2", phase="Pending")]
    pods += [pod(node=["n1"]), pod(node=None), {"kind": "Pod", "metadata": {}}]
    grouped = pods_by_node(pods)
    assert set(grouped) == {"n1", "n2"}  # a nodeName that is not a string names no node
    for name in ("n1", "n2", "n3"):
        assert grouped.get(name, []) == bound_pods(pods, name)
    assert [p["status"]["phase"] for p in grouped["n2"]] == ["Running", "Pending"]


def test_items_of_lists_and_objects():
    node = {"kind": "Node", "metadata": {"name": "a"}}
    assert items({"kind": "List", "items": [node, "junk"]}) == [node]
    assert items([node, 3]) == [node] and items(node) == [node] and items("x") == [] and items(None) == []


def test_selector():
    labels = {"a": "1", "b": "2"}
    assert selector_matches({}, labels) and selector_matches({"a": "1"}, labels)
    assert not selector_matches({"a": "2"}, labels) and not selector_matches({"c": "1"}, labels)
