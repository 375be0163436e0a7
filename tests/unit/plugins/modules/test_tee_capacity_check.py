"""tee_capacity_check: pass/fail and the operator-facing messages."""

from __future__ import annotations

import pytest
from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import HostReader
from ansible_collections.confidential.tee.plugins.modules import tee_capacity_check

CG = "/sys/fs/cgroup"


@pytest.fixture
def tdx_host(fs):
    fs.create_file(f"{CG}/misc.capacity", contents="tdx 63\n")
    fs.create_file(f"{CG}/misc.current", contents="tdx 60\n")
    return fs


def test_passes_with_all_checks_listed(tdx_host, run_module):
    result = run_module(
        tee_capacity_check, {"resource": "tdx", "min_free": 3, "max_utilization": 96, "expected_capacity": 63}
    )
    assert not result["failed"], result["msg"]
    assert [c["name"] for c in result["checks"]] == [
        "min_capacity",
        "expected_capacity",
        "min_free",
        "max_utilization",
    ]
    assert (result["capacity"], result["current"], result["free"]) == (63, 60, 3)


def test_min_free_failure_says_what_where_and_how(tdx_host, run_module):
    result = run_module(tee_capacity_check, {"resource": "tdx", "min_free": 4})
    assert result["failed"]
    assert "only 3 of 63 keys free" in result["msg"] and CG in result["msg"]
    assert "stop unused guests" in result["msg"]
    assert result["checks"][-1] == {
        "name": "min_free",
        "status": "FAIL",
        "ok": False,
        "message": result["msg"],
        "fix": None,
    }


def test_zero_tdx_capacity_points_at_dmesg_bios_and_kernel(fs, run_module):
    fs.create_file(f"{CG}/misc.capacity", contents="")
    fs.create_file(f"{CG}/misc.current", contents="")
    result = run_module(tee_capacity_check, {"resource": "tdx"})
    assert result["failed"] and result["capacity"] == 0
    for hint in ("tdx capacity 0", "dmesg | grep -i tdx", "'virt/tdx: TDX-Module initialized' at boot", "BIOS", "6.16"):
        assert hint in result["msg"]


def test_snp_checks_sev_es(fs, run_module):
    fs.create_file(f"{CG}/misc.capacity", contents="sev 410\n")
    fs.create_file(f"{CG}/misc.current", contents="sev 0\n")
    result = run_module(tee_capacity_check, {"resource": "snp"})
    assert result["failed"] and result["resource"] == "sev_es"
    assert "SEV-ES ASID Space Limit" in result["msg"]


def test_no_controller(fs, run_module):
    result = run_module(tee_capacity_check, {"resource": "sev"})
    assert result["failed"] and "CONFIG_CGROUP_MISC" in result["msg"] and result["capacity"] is None


def test_old_kernel_lower_bound_is_stated(fs, run_module):
    fs.create_file(f"{CG}/misc.capacity", contents="tdx 4\n")
    fs.create_file(f"{CG}/kubepods/misc.current", contents="tdx 3\n")
    result = run_module(tee_capacity_check, {"resource": "tdx", "min_free": 2})
    assert result["failed"] and result["current_is_lower_bound"]
    assert "lower bound" in result["msg"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"min_free": -1}, "min_free must be 0 or more"),
        ({"max_utilization": 150.0}, "between 0 and 100"),
        ({"expected_capacity": -5}, "expected_capacity must be 0 or more"),
    ],
)
def test_bad_arguments(tdx_host, run_module, args, message):
    result = run_module(tee_capacity_check, {"resource": "tdx", **args})
    assert result["failed"] and message in result["msg"]


def test_unknown_resource_choice_is_rejected(tdx_host, run_module):
    result = run_module(tee_capacity_check, {"resource": "sgx"})
    assert result["failed"] and "resource" in result["msg"]


def _snp_host(fs, hiding):
    fs.create_file(f"{CG}/misc.capacity", contents="sev 410\nsev_es 99\n")
    fs.create_file(f"{CG}/misc.current", contents="sev 0\nsev_es 10\n")
    if hiding is not None:
        fs.create_file("/sys/module/kvm_amd/parameters/ciphertext_hiding_asids", contents=hiding)
    else:
        fs.create_dir("/sys/module/kvm_amd/parameters")


def test_snp_is_bounded_by_the_ciphertext_hiding_range(fs, run_module):
    _snp_host(fs, "16\n")
    result = run_module(tee_capacity_check, {"resource": "snp", "min_free": 20})
    assert result["failed"] and result["snp_asids"] == 16
    assert (result["capacity"], result["free"]) == (16, 16)  # 89 look free in misc.current
    assert "SNP ASIDs 1..16 of ciphertext hiding" in result["msg"] and "ret=-16" in result["msg"]
    assert not run_module(tee_capacity_check, {"resource": "sev_es", "min_free": 20})["failed"]  # the joint pool


@pytest.mark.parametrize("hiding", [None, "0\n"])
def test_snp_without_a_split_is_the_joint_pool(fs, run_module, hiding):
    _snp_host(fs, hiding)
    result = run_module(tee_capacity_check, {"resource": "snp", "min_free": 20})
    assert not result["failed"] and result["snp_asids"] is None and result["free"] == 89


def test_a_garbled_parameter_warns_and_checks_the_joint_pool(fs, run_module):
    _snp_host(fs, "max\n")
    result = run_module(tee_capacity_check, {"resource": "snp", "min_free": 20})
    assert result["snp_asids"] is None and any("ciphertext_hiding_asids" in w for w in result.get("warnings", []))


def test_documentation_parses_and_returns_every_key(tdx_host, run_module):
    import yaml

    options = yaml.safe_load(tee_capacity_check.DOCUMENTATION)["options"]
    assert options["resource"]["choices"] == ["tdx", "sev", "sev_es", "snp"]
    returned = set(yaml.safe_load(tee_capacity_check.RETURN))
    result = run_module(tee_capacity_check, {"resource": "tdx"})
    assert returned == set(result) - {"changed", "failed", "msg", "invocation", "warnings"}


def test_validates_the_registered_info_result_of_another_root(tmp_path, run_module):
    """The README's DaemonSet form: tee_capacity_info read /host, the check is given that result and reads nothing
    under its own default host_root (/ here has no TDX keys)."""
    from ansible_collections.confidential.tee.plugins.module_utils.host.capacity_facts import capacity_facts

    (tmp_path / "sys/fs/cgroup").mkdir(parents=True)
    (tmp_path / "sys/fs/cgroup/misc.capacity").write_text("tdx 63\n")
    (tmp_path / "sys/fs/cgroup/misc.current").write_text("tdx 12\n")
    registered = capacity_facts(HostReader(str(tmp_path)))
    result = run_module(tee_capacity_check, {"capacity": registered, "resource": "tdx", "min_free": 4})
    assert not result["failed"], result["msg"]
    assert (result["capacity"], result["current"], result["free"]) == (63, 12, 51)

    other = run_module(tee_capacity_check, {"capacity": registered, "host_root": "/elsewhere", "resource": "tdx"})
    assert other["failed"] and f"read under {tmp_path}" in other["msg"]


def test_a_capacity_that_is_not_an_info_result_is_refused(run_module):
    result = run_module(tee_capacity_check, {"capacity": {"rc": 0}, "resource": "tdx"})
    assert result["failed"] and "register the result of confidential.tee.tee_capacity_info" in result["msg"]


def test_an_unread_resource_is_unknown_not_zero(tmp_path, run_module):
    from ansible_collections.confidential.tee.plugins.module_utils.host.capacity_facts import capacity_facts

    (tmp_path / "sys/fs/cgroup").mkdir(parents=True)
    (tmp_path / "sys/fs/cgroup/misc.capacity").write_text("tdx 63\n")
    (tmp_path / "sys/fs/cgroup/misc.current").write_text("tdx 12\n")
    result = run_module(
        tee_capacity_check, {"capacity": capacity_facts(HostReader(str(tmp_path)), ["tdx"]), "resource": "sev"}
    )
    assert result["failed"] and result["capacity"] is None and "unknown" in result["msg"]
