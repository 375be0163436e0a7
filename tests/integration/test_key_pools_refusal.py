"""A refused key-pool plan stops a user's playbook by itself (issue 43): one that plans with the key_pools_plan filter
and renders with the cluster roles, with no ``fail`` task after the plan, through the real ansible-playbook."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow

# Kata and KubeVirt on one TDX node with NFD as the pool: two pools for the same keys.
DOUBLE_POOL = {"name": "tdx-1", "vendor": "intel", "consumers": ["kata", "kubevirt"], "mode": "nfd"}
HOST = "controller"

# What each role's manifests mode is told; out/ must stay absent.
ROLE_VARS = {
    role: {f"{role}_output": "manifests", f"{role}_manifest_dir": "{{ playbook_dir }}/out"}
    for role in ("nfd_tee_rules", "kata_runtimeclasses", "kubevirt_cc")
}


def _role(role: str, plan: str) -> dict:
    return {
        "name": f"Render {role}",
        "ansible.builtin.include_role": {"name": f"confidential.tee.{role}"},
        "vars": {**ROLE_VARS[role], f"{role}_key_pools": plan},
    }


def _module_message(playbook, run_dir) -> str:
    """The message the tee_key_pools module fails with for the same nodes: what users saw before the filter."""
    task = {"name": "Plan with the module", "confidential.tee.tee_key_pools": {"nodes": [DOUBLE_POOL]}}
    run = playbook(run_dir, [task], {HOST: {}})
    result = run.result("Plan with the module", HOST)
    assert result.get("failed") is True, result
    assert "two pools for the same TDX keys" in result["msg"]
    return result["msg"]


def test_a_playbook_without_a_fail_task_stops_at_the_plan_with_its_message(playbook, tmp_path):
    expected = _module_message(playbook, tmp_path)
    tasks = [
        {
            "name": "Plan the key pools",
            "ansible.builtin.set_fact": {"tee_key_pools_plan": "{{ [node] | confidential.tee.key_pools_plan }}"},
        },
        # As the filter's EXAMPLES once showed, minus the fail task that had to follow.
        *[_role(role, "{{ tee_key_pools_plan }}") for role in ROLE_VARS],
        {"name": "After the roles", "ansible.builtin.debug": {"msg": "carried on"}},
    ]
    run = playbook(tmp_path, tasks, {HOST: {"node": DOUBLE_POOL}})
    assert run.returncode != 0
    planned = run.result("Plan the key pools", HOST)
    assert planned["failed"] is True
    # Ansible names the failing filter, then the plan's own message, word for word as the module gave it.
    assert planned["msg"].endswith("The filter plugin 'confidential.tee.key_pools_plan' failed: " + expected)
    for later in [*(f"Render {role}" for role in ROLE_VARS), "After the roles"]:
        with pytest.raises(KeyError):
            run.result(later, HOST)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("role", sorted(ROLE_VARS))
def test_a_role_given_a_refused_plan_as_data_refuses_it_with_its_message(playbook, tmp_path, role):
    # The cluster_inventory filter returns the plan as data ({refused: message}) for the cluster playbook's own check;
    # a playbook of the user's that hands it to a role without that check still renders nothing.
    expected = _module_message(playbook, tmp_path)
    tasks = [
        {
            "name": "Read the node group and plan",
            "ansible.builtin.set_fact": {
                "inventory": "{{ [inventory_hostname] | confidential.tee.cluster_inventory(hostvars) }}"
            },
        },
        _role(role, "{{ inventory.plan }}"),
    ]
    node = {
        "tee_cpu_vendor": "intel",
        "tee_node_consumers": ["kata", "kubevirt"],
        "tee_key_pool_mode": "nfd",
        "tee_k8s_node_name": "tdx-1",
    }
    run = playbook(tmp_path, tasks, {HOST: node})
    assert run.returncode != 0
    assert run.result("Read the node group and plan", HOST).get("failed") is not True
    failed = [
        entry["hosts"][HOST]
        for play in run.data["plays"]
        for entry in play["tasks"]
        if entry["hosts"].get(HOST, {}).get("failed")
    ]
    assert len(failed) == 1
    assert failed[0]["msg"].endswith(expected), failed[0]["msg"]
    assert not (tmp_path / "out").exists()
