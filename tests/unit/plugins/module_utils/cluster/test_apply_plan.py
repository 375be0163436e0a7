"""apply_plan: an object is written only when the live object differs in what we set (issue 31, C3)."""

from __future__ import annotations

import copy

import pytest
from ansible_collections.confidential.tee.plugins.module_utils.cluster import apply_plan as ap

MANAGER = "confidential-tee"
WANTED = {
    "apiVersion": "node.k8s.io/v1",
    "kind": "RuntimeClass",
    "metadata": {"name": "kata-qemu-tdx", "labels": {"app.kubernetes.io/managed-by": "confidential.tee"}},
    "handler": "kata-qemu-tdx",
    "overhead": {"podFixed": {"cpu": "1", "memory": "10240Mi", "tdx.intel.com/keys": "1"}},
    "scheduling": {"nodeSelector": {"intel.feature.node.kubernetes.io/tdx": "true"}},
}
# What the API server holds after a server-side apply of WANTED: quantities canonical, its own metadata, and the
# manager's fields (fieldsV1) as the apiserver records them.
LIVE = {
    **copy.deepcopy(WANTED),
    "metadata": {
        "name": "kata-qemu-tdx",
        "uid": "0b7f",
        "resourceVersion": "412",
        "labels": {"app.kubernetes.io/managed-by": "confidential.tee", "team": "theirs"},
        "managedFields": [
            {
                "manager": MANAGER,
                "operation": "Apply",
                "apiVersion": "node.k8s.io/v1",
                "fieldsType": "FieldsV1",
                "fieldsV1": {
                    "f:handler": {},
                    "f:metadata": {"f:labels": {"f:app.kubernetes.io/managed-by": {}}},
                    "f:overhead": {"f:podFixed": {"f:cpu": {}, "f:memory": {}, "f:tdx.intel.com/keys": {}}},
                    "f:scheduling": {"f:nodeSelector": {"f:intel.feature.node.kubernetes.io/tdx": {}}},
                },
            },
            {"manager": "kubectl-label", "operation": "Update", "apiVersion": "v1", "fieldsV1": {}},
        ],
    },
    "overhead": {"podFixed": {"cpu": "1", "memory": "10Gi", "tdx.intel.com/keys": "1"}},
}


def step(wanted=WANTED, live=LIVE, state="present"):
    return ap.plan_step(wanted, live, state, MANAGER).action


def test_an_applied_object_is_unchanged_also_with_canonical_quantities_and_foreign_fields():
    assert step() == "unchanged"


@pytest.mark.parametrize(
    "change",
    [
        lambda o: o["metadata"]["labels"].update({"app.kubernetes.io/managed-by": "someone"}),  # a changed label
        lambda o: o["metadata"]["labels"].update({"new": "label"}),  # an added label
        lambda o: o["overhead"]["podFixed"].update({"memory": "10241Mi"}),  # a different quantity
        lambda o: o["scheduling"]["nodeSelector"].pop("intel.feature.node.kubernetes.io/tdx"),  # a removed field
        lambda o: o.pop("scheduling"),  # a removed map the manager owned
        lambda o: o.update(handler="kata-qemu"),
        lambda o: o.update(apiVersion="node.k8s.io/v1beta1"),  # applied at another version
    ],
)
def test_any_difference_in_what_we_set_or_owned_is_written(change):
    wanted = copy.deepcopy(WANTED)
    change(wanted)
    assert step(wanted) == "update"


def test_an_object_another_manager_applied_or_nobody_made_is_written():
    foreign = copy.deepcopy(LIVE)
    foreign["metadata"]["managedFields"][0]["manager"] = "someone-else"
    assert step(live=foreign) == "update"
    assert step(live=None) == "create"


def test_quantities_compare_as_numbers_only_in_quantity_maps():
    assert ap.contains({"podFixed": {"memory": "2Gi"}}, {"podFixed": {"memory": "2048Mi"}})
    assert ap.contains({"limits": {"cpu": "0.5"}}, {"limits": {"cpu": "500m"}})
    assert not ap.contains({"labels": {"size": "2Gi"}}, {"labels": {"size": "2048Mi"}})
    assert not ap.contains({"podFixed": {"memory": "2Gi"}}, {"podFixed": {"memory": "2049Mi"}})


def test_scalars_compare_by_json_type():
    assert not ap.contains({"a": 1}, {"a": True})
    assert not ap.contains({"a": "1"}, {"a": 1})
    assert ap.contains({"a": 1.0}, {"a": 1})


def test_lists_compare_item_by_item_and_by_length():
    assert ap.contains({"l": [{"a": 1, "b": 2}]}, {"l": [{"a": 1}]})
    assert not ap.contains({"l": [{"a": 1}, {"a": 2}]}, {"l": [{"a": 1}]})
    # The manager owned two items of a keyed list and now sets one: the apply would remove the other.
    fields = {"f:l": {'k:{"a":1}': {".": {}}, 'k:{"a":2}': {".": {}}}}
    assert ap.owned_beyond(fields, {"l": [{"a": 1}]})
    assert not ap.owned_beyond(fields, {"l": [{"a": 1}, {"a": 2}]})


NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-1", "labels": {"nvidia.com/cc.mode": "on"}}}


def test_a_merge_patch_is_written_only_when_it_would_change_the_object():
    live = {**NODE, "metadata": {"name": "gpu-1", "labels": {"nvidia.com/cc.mode": "on", "kubernetes.io/os": "linux"}}}
    assert step(NODE, live, "patched") == "unchanged"
    changed = copy.deepcopy(live)
    changed["metadata"]["labels"]["nvidia.com/cc.mode"] = "off"
    assert step(NODE, changed, "patched") == "patch"
    removal = {**NODE, "metadata": {"name": "gpu-1", "labels": {"kubernetes.io/os": None}}}
    assert step(removal, live, "patched") == "patch"
    assert step(removal, changed | {"metadata": {"name": "gpu-1", "labels": {}}}, "patched") == "unchanged"
    # Lists in a merge patch replace the live list: equal only when equal both ways.
    gates = {"spec": {"featureGates": ["A"]}}
    assert step(gates, {"spec": {"featureGates": ["A", "B"]}}, "patched") == "patch"
    assert step(NODE, None, "patched") == "missing"


def test_absent_deletes_only_what_exists():
    assert step(NODE, NODE, "absent") == "delete"
    assert step(NODE, None, "absent") == "unchanged"


def test_inputs_are_checked_before_any_call():
    errors = ap.input_errors([NODE, {"kind": "Node"}, "text", NODE], "present")
    assert errors == [
        "objects[1] has no apiVersion, metadata.name",
        "objects[2] is not a mapping",
        "objects[3]: Node/gpu-1 is given twice",
    ]
    assert ap.input_errors([], "replaced") == ["state must be one of present, patched, absent (got 'replaced')"]


def test_the_diff_before_is_the_live_part_we_set():
    assert ap.projection(LIVE, WANTED)["metadata"] == {
        "name": "kata-qemu-tdx",
        "labels": {"app.kubernetes.io/managed-by": "confidential.tee"},
    }
