"""drift: every finding with its numbers and fix, over Node/Pod/RuntimeClass/NodeFeatureRule objects shaped like
API responses (teesim's builders, validated against the Kubernetes schemas in tests/simulator/cluster)."""

from __future__ import annotations

import copy

import pytest
from ansible_collections.confidential.tee.plugins.module_utils.fleet.drift import (
    fleet_drift,
    kernel_pool,
    nfd_advertisers,
    pool_catalog,
)
from ansible_collections.confidential.tee.plugins.module_utils.fleet.prometheus import render_metrics
from ansible_collections.confidential.tee.plugins.module_utils.fleet.quantity import INT64_MAX, parse_count
from prometheus_client.parser import text_string_to_metric_families
from teesim.fixtures import k8s_objects as k8s
from teesim.fixtures.fleet import KATA_SNP, KATA_TDX, RULES, SNP_LABEL, TDX_LABEL


def host(capacity, in_use=None, cgroups=None, lower_bound=False, hardware=None):
    """The parts of a tee_host_info (preflight) result drift reads."""
    resources = {}
    for name, cap in capacity.items():
        used = (in_use or {}).get(name, 0)
        resources[name] = {
            "capacity": cap,
            "current": used,
            "free": None if cap is None or used is None else max(cap - used, 0),
            "peak": used,
            "current_is_lower_bound": lower_bound,
        }
    cgroup_list = [
        {"path": path, "current": current, "events": {name: 0 for name in current}}
        for path, current in (cgroups or {}).items()
    ]
    return {
        "capacity": {"misc_controller": {"present": True}, "resources": resources, "cgroups": cgroup_list},
        "hardware_keys": hardware or {},
    }


def node(name, extended, labels=None):
    return k8s.node(name, "10.0.0.9", labels or {}, extended, "6.16.0", "Ubuntu 24.04.3 LTS")


def kata(name, node_name, phase="Running", runtime_class=KATA_TDX):
    return k8s.kata_pod(name, node_name, runtime_class, phase)


def vm(name, node_name, device="devices.kubevirt.io/tdx", phase="Running"):
    return k8s.virt_launcher_pod(name, node_name, device, phase)


def drift(hosts, nodes, pods=(), runtime_classes=(), rules=RULES, resource_map=None):
    kube = {"nodes": k8s.as_list(list(nodes)), "pods": list(pods), "runtime_classes": list(runtime_classes)}
    kube["node_feature_rules"] = k8s.as_list(list(rules))
    return fleet_drift(hosts, kube, resource_map)


def findings(result, node_name, finding_id=None):
    found = result["nodes"][node_name]["findings"]
    return [f for f in found if finding_id is None or f["id"] == finding_id]


TWO_POOLS = {"devices.kubevirt.io/tdx": "63", "tdx.intel.com/keys": "63"}


def test_double_pool_with_worst_case_and_current_overcommit():
    pods = [kata(f"k{n}", "n1") for n in range(8)] + [vm(f"v{n}", "n1") for n in range(6)]
    result = drift({"n1": host({"tdx": 63}, {"tdx": 14})}, [node("n1", TWO_POOLS)], pods)
    (double,) = findings(result, "n1", "double_pool")
    assert double["severity"] == "critical" and double["resource"] == "tdx"
    assert double["numbers"] == {
        "kernel_capacity": 63,
        "kernel_capacity_source": "misc",
        "advertised": {"devices.kubevirt.io/tdx": 63, "tdx.intel.com/keys": 63},
        "schedulable": 126,
        "worst_case_overcommit": 63,
        "kernel_free": 49,
        "scheduler_free": 112,  # (63 - 6) + (63 - 8)
        "overcommit_now": 63,
    }
    assert "The scheduler can place 126 guests on 63 keys: up to 63 fail" in double["detail"]
    assert "make KubeVirt VMs request tdx.intel.com/keys" in double["fix"]
    assert "NodeFeatureRule intel-tdx/intel.tdx = @cpu.security.tdx.total_keys" in double["detail"]


def test_one_pool_at_zero_is_no_double_pool():
    result = drift({"n1": host({"tdx": 63})}, [node("n1", dict(TWO_POOLS, **{"devices.kubevirt.io/tdx": "0"}))])
    assert findings(result, "n1", "double_pool") == []


def test_keys_used_outside_kubernetes_named_by_cgroup():
    pods = [kata("k0", "n1"), kata("k1", "n1"), kata("k2", "n1", "Pending"), kata("k3", "n1", "Succeeded")]
    cgroups = {"kubepods.slice": {"tdx": 2}, "machine.slice": {"tdx": 5}, "system.slice": {"tdx": 1}}
    nodes = [node("n1", {"tdx.intel.com/keys": "63"})]
    result = drift({"n1": host({"tdx": 63}, {"tdx": 8}, cgroups)}, nodes, pods)
    (outside,) = findings(result, "n1", "external_usage")
    assert outside["numbers"] == {
        "kernel_in_use": 8,
        "in_use_is_lower_bound": False,
        "held_by_running_pods": 2,  # the pending pod's guest holds no key yet; the finished one none any more
        "outside_kubernetes": 6,
        "charged_outside_kubepods": {"machine.slice": 5, "system.slice": 1},
        "reserved": 0,
    }
    assert outside["severity"] == "critical"
    assert (
        "machine.slice (5), system.slice (1)" in outside["detail"]
        and "lower the advertised count by 6" in outside["fix"]
    )
    pools = result["nodes"]["n1"]["pools"]["tdx"]["advertised"]
    assert pools[0]["requested"] == 3 and pools[0]["held_by_running_pods"] == 2


def test_keys_outside_kubernetes_within_a_reservation_are_not_critical():
    """docs/fleet.md: a static NFD value below capacity is a reservation; guests outside Kubernetes that fit in it
    take no key the scheduler counts on."""
    cgroups = {"kubepods.slice": {"tdx": 2}, "machine.slice": {"tdx": 6}}
    pods = [kata("k0", "n1"), kata("k1", "n1")]
    covered = drift({"n1": host({"tdx": 63}, {"tdx": 8}, cgroups)}, [node("n1", {"tdx.intel.com/keys": "57"})], pods)
    (outside,) = findings(covered, "n1", "external_usage")
    assert outside["severity"] == "info" and outside["numbers"]["reserved"] == 6
    short = drift({"n1": host({"tdx": 63}, {"tdx": 8}, cgroups)}, [node("n1", {"tdx.intel.com/keys": "58"})], pods)
    (outside,) = findings(short, "n1", "external_usage")
    assert outside["severity"] == "critical" and outside["numbers"]["reserved"] == 5


def test_a_split_without_overcommit_is_not_critical():
    """Two advertisers with fixed shares summing to the capacity: two pools, no guest placed on a missing key."""
    nodes = [node("n1", {"tdx.intel.com/keys": "40", "devices.kubevirt.io/tdx": "23"})]
    (split,) = findings(drift({"n1": host({"tdx": 63}, {"tdx": 0})}, nodes, []), "n1", "double_pool")
    assert split["severity"] == "info" and split["numbers"]["worst_case_overcommit"] == 0
    nodes = [node("n1", {"tdx.intel.com/keys": "40", "devices.kubevirt.io/tdx": "24"})]
    (double,) = findings(drift({"n1": host({"tdx": 63}, {"tdx": 0})}, nodes, []), "n1", "double_pool")
    assert double["severity"] == "critical" and double["numbers"]["worst_case_overcommit"] == 1


def test_no_external_usage_when_pods_account_for_every_key():
    nodes = [node("n1", {"tdx.intel.com/keys": "63"})]
    result = drift({"n1": host({"tdx": 63}, {"tdx": 2})}, nodes, [kata("k0", "n1"), kata("k1", "n1")])
    assert findings(result, "n1", "external_usage") == []


def test_lower_bound_usage_on_old_kernels_is_said():
    nodes = [node("n1", {"tdx.intel.com/keys": "63"})]
    result = drift({"n1": host({"tdx": 63}, {"tdx": 3}, lower_bound=True)}, nodes)
    (outside,) = findings(result, "n1", "external_usage")
    assert outside["numbers"]["in_use_is_lower_bound"] and "(at least)" in outside["detail"]


@pytest.mark.parametrize(
    ("advertised", "severity", "words"),
    [
        ("0", "warning", "the advertiser latched 0"),
        ("63", "critical", "32 guests more than there are keys can be scheduled"),
        ("20", "warning", "11 keys are stranded"),
    ],
)
def test_stale_device_plugin(advertised, severity, words):
    result = drift({"n1": host({"tdx": 31})}, [node("n1", {"devices.kubevirt.io/tdx": advertised})])
    (stale,) = findings(result, "n1", "stale_advertiser")
    assert stale["severity"] == severity and words in stale["detail"]
    assert stale["numbers"]["advertised"] == int(advertised) and stale["numbers"]["kernel_capacity"] == 31
    assert "virt-handler" in stale["fix"]


def test_stale_nfd_feature_points_at_nfd_worker():
    result = drift({"n1": host({"tdx": 31})}, [node("n1", {"tdx.intel.com/keys": "63"})])
    (stale,) = findings(result, "n1", "stale_advertiser")
    assert "nfd-worker" in stale["fix"]


def test_a_static_nfd_value_below_capacity_is_a_reservation_not_drift():
    static = k8s.node_feature_rule(
        "tdx-static", [{"name": "r", "extendedResources": {"tdx.intel.com/keys": "50"}, "matchFeatures": []}]
    )
    nodes = [node("n1", {"tdx.intel.com/keys": "50"})]
    assert findings(drift({"n1": host({"tdx": 63})}, nodes, rules=[static]), "n1") == []
    higher = drift({"n1": host({"tdx": 40})}, nodes, rules=[static])
    (stale,) = findings(higher, "n1", "stale_advertiser")
    assert stale["severity"] == "critical" and "lower the static value" in stale["fix"]


def test_stale_against_the_hardware_count_when_the_kernel_does_not_count():
    hardware = {"tdx_misc_resource": False, "tdx": {"readable": True, "tdx_guest_keyids": 31}}
    facts = host({"tdx": 0}, hardware=hardware)
    result = drift({"n1": facts}, [node("n1", {"tdx.intel.com/keys": "63"})])
    (stale,) = findings(result, "n1", "stale_advertiser")
    assert stale["numbers"]["kernel_capacity_source"] == "hardware" and "MSR 0x87" in stale["detail"]
    pool = result["nodes"]["n1"]["pools"]["tdx"]
    assert (pool["capacity"], pool["in_use"], pool["source"]) == (31, None, "hardware")


def test_nfd_sev_prefix_quirk():
    nodes = [node("n1", {"sev.amd.com/asids": "99"})]
    result = drift({"n1": host({"sev": 0, "sev_es": 99})}, nodes)
    (quirk,) = findings(result, "n1", "nfd_sev_prefix")
    assert quirk["severity"] == "critical" and quirk["resource"] == "sev"
    assert quirk["numbers"] == {"advertised": 99, "kernel_sev_capacity": 0, "kernel_sev_es_capacity": 99}
    assert "'sev_es 99' matches" in quirk["detail"] and "NodeFeatureRule amd-sev/amd.sev" in quirk["fix"]
    assert findings(result, "n1", "stale_advertiser") == []


def test_no_quirk_when_the_kernel_has_a_sev_line():
    result = drift({"n1": host({"sev": 410, "sev_es": 99})}, [node("n1", {"sev.amd.com/asids": "410"})])
    assert findings(result, "n1") == []


def test_runtimeclass_overhead_on_a_resource_nothing_advertises():
    nodes = [node("snp", {}, dict(SNP_LABEL)), node("tdx", {"tdx.intel.com/keys": "63"}, dict(TDX_LABEL))]
    result = drift({"snp": host({"sev_es": 99}), "tdx": host({"tdx": 63})}, nodes, runtime_classes=[KATA_SNP, KATA_TDX])
    (fleet,) = result["findings"]
    assert fleet["node"] is None and fleet["severity"] == "critical"
    assert fleet["numbers"] == {
        "runtime_class": "kata-snp",
        "per_pod": 1,
        "nodes_it_can_land_on": ["snp"],
        "nodes_advertising": [],
    }
    assert "its pods stay Pending" in fleet["detail"]
    assert [f["node"] for f in findings(result, "snp", "runtimeclass_unadvertised")] == ["snp"]
    assert findings(result, "tdx") == []


def test_runtimeclass_selecting_a_node_that_does_not_advertise():
    nodes = [node("a", {"tdx.intel.com/keys": "63"}, dict(TDX_LABEL)), node("b", {}, dict(TDX_LABEL))]
    result = drift({"a": host({"tdx": 63}), "b": host({"tdx": 63})}, nodes, runtime_classes=[KATA_TDX])
    assert result["findings"] == []
    (warning,) = findings(result, "b", "runtimeclass_unadvertised")
    assert warning["severity"] == "warning" and "selects this node" in warning["detail"]


def test_sev_es_guests_no_resource_counts():
    pods = [vm(f"v{n}", "n1", "devices.kubevirt.io/sev") for n in range(4)]
    facts = host({"sev_es": 99}, {"sev_es": 6}, {"kubepods.slice": {"sev_es": 4}, "machine.slice": {"sev_es": 2}})
    result = drift({"n1": facts}, [node("n1", {"devices.kubevirt.io/sev": "110"})], pods)
    (uncounted,) = findings(result, "n1", "sev_es_uncounted")
    assert uncounted["numbers"] == {
        "kernel_in_use": 6,
        "kernel_capacity": 99,
        "advertised_pools": [],
        "running_pods_with_kubevirt_sev_device": 4,
        "charged_outside_kubepods": {"machine.slice": 2},
    }
    assert "sev-snp.amd.com/esids" in uncounted["fix"]
    assert findings(result, "n1", "external_usage") == []


def test_with_an_esids_pool_unaccounted_sev_es_keys_are_external_usage():
    facts = host({"sev_es": 99}, {"sev_es": 6})
    result = drift({"n1": facts}, [node("n1", {"sev-snp.amd.com/esids": "99"})])
    assert findings(result, "n1", "sev_es_uncounted") == []
    assert findings(result, "n1", "external_usage")[0]["numbers"]["outside_kubernetes"] == 6


def test_node_missing_from_kubernetes_and_unreachable_host():
    result = drift({"gone": host({"tdx": 63}), "n1": None}, [node("n1", TWO_POOLS)])
    assert result["nodes"]["gone"]["in_kubernetes"] is False
    assert result["nodes"]["gone"]["reason"] == "no Node object named gone in the Kubernetes objects"
    # Without host facts the double pool is still visible, its size unknown.
    (double,) = findings(result, "n1", "double_pool")
    assert double["numbers"]["kernel_capacity"] is None and double["numbers"]["worst_case_overcommit"] == 63


def test_bad_quantities_become_problems():
    result = drift({"n1": host({"tdx": 63})}, [node("n1", {"tdx.intel.com/keys": "sixty"})])
    why = "'sixty' is not a quantity: expected a number with an optional SI suffix"
    assert result["nodes"]["n1"]["problems"] == [
        "Node n1 status.capacity[tdx.intel.com/keys]: " + why,
        "Node n1 status.allocatable[tdx.intel.com/keys]: " + why,
    ]
    (pool,) = result["nodes"]["n1"]["pools"]["tdx"]["advertised"]
    assert pool["capacity"] is None and pool["allocatable"] is None and len(pool["unknown"]) == 2
    assert findings(result, "n1") == []


def test_an_unreadable_pod_request_is_unknown_not_zero():
    pods = [kata("k1", "n1"), kata("k2", "n1")]
    pods[1]["spec"]["overhead"]["tdx.intel.com/keys"] = "1500m"
    result = drift({"n1": host({"tdx": 63}, {"tdx": 5})}, [node("n1", TWO_POOLS)], pods)
    pools = {p["name"]: p for p in result["nodes"]["n1"]["pools"]["tdx"]["advertised"]}
    keys = pools["tdx.intel.com/keys"]
    assert keys["requested"] is None and keys["held_by_running_pods"] is None
    assert keys["unknown"] == [
        "Pod confidential/k2 spec.overhead[tdx.intel.com/keys]: '1500m' is not a whole number "
        "(extended resources are counts)"
    ]
    assert pools["devices.kubevirt.io/tdx"]["requested"] == 0
    assert result["nodes"]["n1"]["problems"] == keys["unknown"]
    (double,) = findings(result, "n1", "double_pool")
    assert "overcommit_now" not in double["numbers"]  # needs every request
    assert findings(result, "n1", "external_usage") == []  # cannot be told apart from an unknown request


def test_fractional_runtimeclass_overhead_is_a_problem_and_an_unreadable_node_count_is_no_finding():
    fractional = {**KATA_TDX, "overhead": {"podFixed": {"tdx.intel.com/keys": "1500m", "cpu": "250m"}}}
    nodes = [node("a", {"tdx.intel.com/keys": "lots"}, dict(TDX_LABEL))]
    result = drift({"a": host({"tdx": 63})}, nodes, runtime_classes=[fractional])
    assert result["problems"] == [
        "RuntimeClass kata-tdx overhead.podFixed[tdx.intel.com/keys]: '1500m' is not a whole number "
        "(extended resources are counts)"
    ]
    assert result["findings"] == [] and findings(result, "a") == []


def test_resource_map_adds_pools():
    nodes = [node("n1", {"example.com/td": "63", "tdx.intel.com/keys": "63"})]
    result = drift({"n1": host({"tdx": 63})}, nodes, resource_map={"example.com/td": "tdx"})
    assert findings(result, "n1", "double_pool")[0]["numbers"]["schedulable"] == 126


def test_nfd_rules_name_the_pools_they_advertise():
    catalog = pool_catalog(nfd_advertisers(k8s.as_list(RULES)))
    assert catalog["sev.amd.com/asids"]["misc"] == "sev" and catalog["sev.amd.com/asids"]["kind"] == "nfd"
    assert (
        catalog["tdx.intel.com/keys"]["advertiser"]
        == "NodeFeatureRule intel-tdx/intel.tdx = @cpu.security.tdx.total_keys"
    )
    assert nfd_advertisers([{"kind": "NodeFeatureRule", "spec": "junk"}, 7]) == {}


def test_kernel_pool_without_a_misc_controller_is_unknown():
    pool = kernel_pool({"capacity": {"misc_controller": {"present": False}}}, "tdx")
    assert (pool["capacity"], pool["in_use"], pool["free"], pool["source"]) == (None, None, None, None)


HOSTILE = [
    None,
    "nodes",
    {"kind": "List", "items": "x"},
    [{"kind": "Node"}, {"kind": "Node", "metadata": "x"}, {"kind": "Node", "metadata": {"name": "n1"}, "status": "x"}],
    [{"kind": "Node", "metadata": {"name": "n1"}, "status": {"capacity": "x", "allocatable": ["y"]}}],
]
HOSTILE_PODS = [
    None,
    [{"kind": "Pod", "spec": "x"}],
    [{"kind": "Pod", "spec": {"nodeName": "n1", "containers": "x", "initContainers": [3], "overhead": [1]}}],
    [{"kind": "Pod", "spec": {"nodeName": "n1", "containers": [{"resources": {"requests": "x", "limits": 4}}]}}],
]


@pytest.mark.parametrize("nodes", HOSTILE)
@pytest.mark.parametrize("pods", HOSTILE_PODS)
def test_hostile_objects_are_no_crash(nodes, pods):
    kube = {
        "nodes": nodes,
        "pods": pods,
        "runtime_classes": [{"kind": "RuntimeClass", "overhead": {"podFixed": {"a.b/c": "x"}}, "scheduling": "y"}],
        "node_feature_rules": [{"kind": "NodeFeatureRule", "spec": {"rules": ["x", {"extendedResources": "y"}]}}],
    }
    result = fleet_drift({"n1": host({"tdx": 63}, {"tdx": 1}), "n2": None}, kube)
    assert set(result["nodes"]) == {"n1", "n2"}


def test_an_unreadable_misc_events_says_why_its_metric_is_missing():
    readable = host({"tdx": 63}, {"tdx": 3}, {"kubepods.slice": {"tdx": 3}, "machine.slice": {"tdx": 0}})
    assert drift({"n1": readable}, [node("n1", {"tdx.intel.com/keys": "63"})], [])["nodes"]["n1"]["problems"] == []
    garbled = host({"tdx": 63}, {"tdx": 3}, {"kubepods.slice": {"tdx": 3}, "machine.slice": {"tdx": 0}})
    garbled["capacity"]["cgroups"][1]["events"] = {"tdx": None}
    result = drift({"n1": garbled}, [node("n1", {"tdx.intel.com/keys": "63"})], [])["nodes"]["n1"]
    assert result["pools"]["tdx"]["events"] is None
    assert result["problems"] == [
        "n1 misc.events of machine.slice has no readable tdx.max count: tee_misc_events_total left out"
    ]


def _hidden(facts, snp):
    facts["sev_asids"] = {"ciphertext_hiding": True, "snp": {"capacity": snp}, "joint": {"capacity": 99}}
    return facts


def test_an_snp_pool_larger_than_the_ciphertext_hiding_range_is_critical():
    facts = _hidden(host({"sev_es": 99}, {"sev_es": 6}), 16)
    result = drift({"n1": facts}, [node("n1", {"sev-snp.amd.com/esids": "99"})])
    (finding,) = findings(result, "n1", "snp_pool_exceeds_snp_range")
    assert finding["severity"] == "critical"
    assert finding["numbers"] == {"advertised": 99, "snp_asids": 16, "joint_sev_es_asids": 99, "difference": 83}
    assert "fail to launch with EBUSY while misc.current sev_es still shows keys free" in finding["detail"]
    assert '"16"' in finding["fix"]
    # The joint count itself is what the kernel says: no stale-advertiser finding on top.
    assert findings(result, "n1", "stale_advertiser") == []


def test_an_snp_pool_within_the_range_or_without_hiding_is_fine():
    within = drift({"n1": _hidden(host({"sev_es": 99}), 16)}, [node("n1", {"sev-snp.amd.com/esids": "16"})])
    assert findings(within, "n1", "snp_pool_exceeds_snp_range") == []
    plain = host({"sev_es": 99})
    plain["sev_asids"] = {"ciphertext_hiding": False, "snp": {"capacity": 99}}
    assert findings(drift({"n1": plain}, [node("n1", {"sev-snp.amd.com/esids": "99"})]), "n1") == []


def test_critical_findings_say_how_the_failed_launches_show():
    result = drift({"n1": host({"tdx": 63})}, [node("n1", TWO_POOLS)])
    (double,) = findings(result, "n1", "double_pool")
    assert "How it shows: a TD launch then fails in KVM_TDX_INIT_VM with ENOSPC" in double["detail"]
    facts = _hidden(host({"sev_es": 99}), 16)
    (snp,) = findings(
        drift({"n1": facts}, [node("n1", {"sev-snp.amd.com/esids": "99"})]), "n1", "snp_pool_exceeds_snp_range"
    )
    assert "ret=-16" in snp["detail"]


def _rule(name, resource, value):
    return {
        "apiVersion": "nfd.k8s-sigs.io/v1alpha1",
        "kind": "NodeFeatureRule",
        "metadata": {"name": name},
        "spec": {"rules": [{"name": "keys", "extendedResources": {resource: value}, "matchFeatures": []}]},
    }


def test_names_that_moved_in_2026_are_fleet_findings():
    rules = [
        *RULES,
        _rule("amd64-tee-keys", "tdx.intel.com/keys", "@cpu.security.tdx.total_keys"),
        _rule("nvidia-cc", "feature.node.kubernetes.io/tdx-keys", "@cpu.security.tdx.total_keys"),
        _rule("nvidia-labels", "feature.node.kubernetes.io/gpu", "8"),  # counts no keys: no finding
    ]
    result = drift({"n1": host({"tdx": 63})}, [node("n1", {"tdx.intel.com/keys": "63"})], rules=rules)
    by_id = {f["id"]: f for f in result["findings"]}
    stale = by_id["stale_nfd_rule"]
    assert stale["title"].startswith("stale rule from the pre-4.1 kata-deploy chart") and stale["severity"] == "warning"
    assert stale["node"] is None and "kubectl delete nodefeaturerule amd64-tee-keys" in stale["fix"]
    third = by_id["gpu_operator_key_pool"]
    assert third["title"] == "third key pool from GPU Operator v25.10 or older" and third["resource"] == "tdx"
    assert third["numbers"]["extended_resource"] == "feature.node.kubernetes.io/tdx-keys"
    assert sorted(by_id) == ["gpu_operator_key_pool", "stale_nfd_rule"]


def test_no_rename_finding_on_the_collections_own_rules():
    result = drift({"n1": host({"tdx": 63})}, [node("n1", {"tdx.intel.com/keys": "63"})])
    assert [f for f in result["findings"] if f["id"] in ("stale_nfd_rule", "gpu_operator_key_pool")] == []


# ------------------------------------------------------------------------------- hostile objects (issue 27)


def advertised_series(result_nodes):
    """``tee_keys_advertised`` samples as Prometheus' own parser reads the exposition text."""
    text = render_metrics(result_nodes)
    families = {family.name: family for family in text_string_to_metric_families(text)}
    family = families.get("tee_keys_advertised")
    return [sample.value for sample in family.samples] if family else []


SAME_VALUE = {
    "10^18": ["1E", "1e18", "1000P", "1000000000000000000", "1000000000000000000000m", "0.001e21", "1000000000000000k"],
    "63": ["63", "63000m", "0.063k", "6.3e1", "63e0", "+63", " 63 "],
}
HUGE = ["99999999999999999999999", "1e23", "9223372036854775808", "1" * 5000, "1e1000000000", "100000E", "0.1e30"]


@pytest.mark.parametrize("value", sorted(SAME_VALUE))
def test_findings_do_not_depend_on_how_a_quantity_is_spelled(value):
    seen = set()
    for spelling in SAME_VALUE[value]:
        result = drift({"n1": host({"tdx": 31})}, [node("n1", {"devices.kubevirt.io/tdx": spelling})])
        (stale,) = findings(result, "n1", "stale_advertiser")
        seen.add((stale["severity"], stale["numbers"]["advertised"], stale["detail"]))
    assert len(seen) == 1, seen


@pytest.mark.parametrize("spelling", HUGE)
def test_a_count_above_int64_keeps_its_finding_and_its_series(spelling):
    result = drift({"n1": host({"tdx": 31})}, [node("n1", {"devices.kubevirt.io/tdx": spelling})])
    (stale,) = findings(result, "n1", "stale_advertiser")
    assert stale["severity"] == "critical" and stale["numbers"]["advertised"] == INT64_MAX
    assert any("more than the scheduler can count" in p for p in result["nodes"]["n1"]["problems"])
    entry = dict(result["nodes"]["n1"], reachable=True, ready=True, counts={})
    assert advertised_series([entry]) == [INT64_MAX]


def test_1e_and_a_huge_digit_count_give_the_same_kind_of_report():
    reports = []
    for spelling in ("1E", "99999999999999999999999"):
        result = drift({"n1": host({"tdx": 31})}, [node("n1", {"devices.kubevirt.io/tdx": spelling})])
        entry = dict(result["nodes"]["n1"], reachable=True, ready=True, counts={})
        reports.append(([f["id"] for f in entry["findings"]], len(advertised_series([entry]))))
    assert reports[0] == reports[1] == (["stale_advertiser"], 1)


@pytest.mark.parametrize(
    ("raw", "count"),
    [
        ("1E", 10**18),
        ("2000m", 2),
        ("1k", 1000),
        ("0.5k", 500),
        ("1Ki", 1024),
        ("9223372036854775807", INT64_MAX),
        ("8Ei", INT64_MAX),  # binary suffixes are capped at 2^63-1 by apimachinery itself
    ],
)
def test_counts_in_range_are_exact_and_without_problem(raw, count):
    assert parse_count(raw) == (count, None)


@pytest.mark.parametrize("raw", ["1.5", "1500m", "99999999999999999999999.5", "-1", "-1e30"])
def test_counts_that_are_fractions_or_negative_stay_unknown(raw):
    count, problem = parse_count(raw)
    assert count is None and problem


# ------------------------------------------------------------------------------------------------- duplicates


def test_two_different_nodes_of_one_name_are_an_input_problem_naming_both():
    first = node("n1", {"devices.kubevirt.io/tdx": "31"})
    second = copy.deepcopy(first)
    second["metadata"]["uid"] = "uid-of-the-second"
    second["status"]["capacity"]["devices.kubevirt.io/tdx"] = "63"
    second["status"]["allocatable"]["devices.kubevirt.io/tdx"] = "63"
    result = drift({"n1": host({"tdx": 31})}, [first, second])
    (problem,) = [p for p in result["problems"] if "Node n1 appears 2 times" in p]
    assert "different objects" in problem and "uid-of-the-second" in problem and "kubectl get nodes" in problem


def test_identical_copies_are_said_too():
    first = node("n1", {"devices.kubevirt.io/tdx": "31"})
    result = drift({"n1": host({"tdx": 31})}, [first, copy.deepcopy(first)])
    assert any("Node n1 appears 2 times" in p and "identical copies" in p for p in result["problems"])


def test_a_pod_listed_twice_is_counted_once_and_said():
    pod = kata("guest", "n1", runtime_class=KATA_TDX)
    pod["spec"]["overhead"] = {"tdx.intel.com/keys": "1"}
    nodes = [node("n1", {"tdx.intel.com/keys": "31"})]
    once = drift({"n1": host({"tdx": 31}, {"tdx": 1})}, nodes, [pod])
    twice = drift({"n1": host({"tdx": 31}, {"tdx": 1})}, nodes, [pod, copy.deepcopy(pod)])
    pools = [r["nodes"]["n1"]["pools"]["tdx"]["advertised"][0]["requested"] for r in (once, twice)]
    assert pools[0] == pools[1] == 1
    assert any(f"Pod {pod['metadata']['namespace']}/guest appears 2 times" in p for p in twice["problems"])


def test_runtime_classes_and_node_feature_rules_listed_twice_are_said_once_each():
    nodes = [node("n1", {"tdx.intel.com/keys": "31"})]
    rules = [*RULES, copy.deepcopy(RULES[0])]
    result = drift({"n1": host({"tdx": 31})}, nodes, runtime_classes=[KATA_TDX, copy.deepcopy(KATA_TDX)], rules=rules)
    assert any(f"NodeFeatureRule {RULES[0]['metadata']['name']} appears 2 times" in p for p in result["problems"])
    assert any(f"RuntimeClass {KATA_TDX['metadata']['name']} appears 2 times" in p for p in result["problems"])
    assert findings(result, "n1", "double_pool") == []
