"""A reader inside a container (its own cgroup, no misc.capacity) through a real ansible-playbook run: the reason
says so and how to read the host's root, never "no misc controller" or a capacity of 0."""

from __future__ import annotations

import pytest
from teesim.kernel.cli import build_pod_view

pytestmark = pytest.mark.slow

TASKS = [
    {"name": "capacity", "confidential.tee.tee_capacity_info": {"host_root": "{{ node_root }}"}},
    {
        "name": "check",
        "confidential.tee.tee_capacity_check": {"host_root": "{{ node_root }}", "resource": "tdx"},
        "ignore_errors": True,
    },
]


@pytest.fixture(scope="module")
def run(tmp_path_factory, playbook):
    root = tmp_path_factory.mktemp("pod")
    build_pod_view(root, "/")  # its own cgroup namespace: /proc/self/cgroup is 0::/
    return playbook(tmp_path_factory.mktemp("run"), TASKS, {"pod": {"node_root": str(root)}})


def test_the_reason_names_the_container_cgroup_and_the_daemonset_form(run):
    controller = run.result("capacity", "pod")["misc_controller"]
    assert controller["present"] is False and controller["not_root_cgroup"] is True
    assert "misc.capacity exists only there" in controller["reason"] and "/proc/1/root" in controller["reason"]
    check = run.result("check", "pod")
    assert check["failed"] and "own cgroup namespace" in check["msg"] and "CONFIG_CGROUP_MISC" not in check["msg"]
