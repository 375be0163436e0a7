"""The three capacity modules in one real ansible-playbook run over four simulated hosts."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow

TASKS = [
    {
        "name": "host",
        "confidential.tee.tee_host_info": {"host_root": "{{ node_root }}", "gather_gpu": False},
    },
    {
        "name": "capacity",
        "confidential.tee.tee_capacity_info": {"host_root": "{{ node_root }}", "cgroups": True},
    },
    {
        "name": "check",
        "confidential.tee.tee_capacity_check": {
            "host_root": "{{ node_root }}",
            "resource": "{{ check_resource }}",
            "min_free": "{{ check_min_free }}",
        },
        "ignore_errors": True,
    },
]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory, teesim_node) -> dict[str, dict]:
    root = tmp_path_factory.mktemp("fleet")
    return {
        "tdx": {
            "node_root": str(
                teesim_node(root / "tdx", "--profile", "current", "--capacity", "tdx=63", "--usage", "tdx=5")
            ),
            "check_resource": "tdx",
            "check_min_free": 10,
        },
        "snp": {
            "node_root": str(
                teesim_node(
                    root / "snp",
                    "--vendor",
                    "amd",
                    "--capacity",
                    "sev=410",
                    "--capacity",
                    "sev_es=99",
                    "--usage",
                    "snp=97",
                )
            ),
            "check_resource": "snp",
            "check_min_free": 4,
        },
        "old": {
            "node_root": str(teesim_node(root / "old", "--profile", "old", "--capacity", "tdx=31", "--usage", "tdx=7")),
            "check_resource": "tdx",
            "check_min_free": 1,
        },
        "nomisc": {
            "node_root": str(teesim_node(root / "nomisc", "--profile", "no-misc")),
            "check_resource": "tdx",
            "check_min_free": 1,
        },
    }


@pytest.fixture(scope="module")
def run(fleet, tmp_path_factory, playbook):
    # One ansible-playbook process covers every host, as an operator's fleet run would.
    return playbook(tmp_path_factory.mktemp("run"), TASKS, fleet)


def test_every_host_ran_every_task(run):
    assert run.returncode == 0, run.stderr
    for host in ("tdx", "snp", "old", "nomisc"):
        assert run.stats[host]["unreachable"] == 0
        assert run.stats[host]["changed"] == 0


def test_tdx_current_kernel(run):
    capacity = run.result("capacity", "tdx")
    tdx = capacity["resources"]["tdx"]
    assert (tdx["capacity"], tdx["current"], tdx["free"], tdx["current_source"]) == (63, 5, 58, "root")
    assert tdx["peak"] == 5
    assert capacity["misc_controller"]["cgroup_version"] == 2
    host = run.result("host", "tdx")["host"]
    assert host["tdx"]["supported"] and host["tdx"]["enabled"] and host["cmdline"]["nohibernate"]
    check = run.result("check", "tdx")
    assert not check.get("failed") and check["free"] == 58


def test_snp_host_charges_sev_es(run):
    capacity = run.result("capacity", "snp")["resources"]
    assert (capacity["sev"]["capacity"], capacity["sev_es"]["capacity"]) == (410, 99)
    assert (capacity["sev_es"]["current"], capacity["sev"]["current"]) == (97, 0)
    host = run.result("host", "snp")["host"]
    assert host["snp"]["supported"] and host["snp"]["enabled"]
    check = run.result("check", "snp")
    assert check["failed"] and check["resource"] == "sev_es"
    assert "only 2 of 99 keys free" in check["msg"]


def test_old_kernel_reports_lower_bound(run):
    tdx = run.result("capacity", "old")["resources"]["tdx"]
    assert (tdx["capacity"], tdx["current"], tdx["current_source"]) == (31, 7, "children_sum")
    assert tdx["current_is_lower_bound"] and tdx["peak"] is None
    assert "lower bound" in run.result("capacity", "old")["notes"][0]
    assert run.result("check", "old")["current_is_lower_bound"]


def test_no_misc_controller(run):
    capacity = run.result("capacity", "nomisc")
    assert capacity["misc_controller"]["present"] is False and capacity["resources"] == {}
    check = run.result("check", "nomisc")
    assert check["failed"] and "CONFIG_CGROUP_MISC" in check["msg"]
