"""tee_capacity_info: the module's contract over simulated host roots (pyfakefs)."""

from __future__ import annotations

from ansible_collections.confidential.tee.plugins.modules import tee_capacity_info

CG = "/host/sys/fs/cgroup"


def test_tdx_host(fs, run_module):
    fs.create_file(f"{CG}/misc.capacity", contents="tdx 63\n")
    fs.create_file(f"{CG}/misc.current", contents="sev 0\nsev_es 0\ntdx 5\n")
    result = run_module(tee_capacity_info, {"host_root": "/host"})
    assert result["changed"] is False and not result["failed"]
    assert result["misc_controller"] == {
        "present": True,
        "cgroup_version": 2,
        "path": CG,
        "reason": None,
        "not_root_cgroup": False,
    }
    tdx = result["resources"]["tdx"]
    assert (tdx["capacity"], tdx["current"], tdx["free"], tdx["current_source"]) == (63, 5, 58, "root")
    # Resources the kernel omits (capacity 0) are reported as such, not left out.
    assert result["resources"]["sev_es"]["capacity"] == 0
    assert result["resource_aliases"] == {"snp": "sev_es", "sev_snp": "sev_es"}
    assert "cgroups" not in result


def test_snp_alias_reports_sev_es_once(fs, run_module):
    fs.create_file(f"{CG}/misc.capacity", contents="sev 410\nsev_es 99\n")
    fs.create_file(f"{CG}/misc.current", contents="sev 1\nsev_es 2\n")
    result = run_module(tee_capacity_info, {"host_root": "/host", "resources": ["snp", "sev_es"]})
    assert list(result["resources"]) == ["sev_es"]
    assert result["resources"]["sev_es"]["consumers"] == ["SEV-ES guests", "SEV-SNP guests"]


def test_no_misc_controller_is_a_fact_not_a_failure(fs, run_module):
    fs.create_file(f"{CG}/cgroup.controllers", contents="cpu memory\n")
    result = run_module(tee_capacity_info, {"host_root": "/host"})
    assert not result["failed"]
    assert result["misc_controller"]["present"] is False
    assert "CONFIG_CGROUP_MISC" in result["misc_controller"]["reason"]
    assert result["resources"] == {}


def test_malformed_lines_warn_and_stay_unknown(fs, run_module):
    fs.create_file(f"{CG}/misc.capacity", contents="tdx sixty-three\n")
    fs.create_file(f"{CG}/misc.current", contents="tdx 5\n")
    result = run_module(tee_capacity_info, {"host_root": "/host"})
    assert result["resources"]["tdx"]["capacity"] is None and result["resources"]["tdx"]["free"] is None
    assert result["problems"][0]["line_number"] == 1
    assert result["issues"] == result["problems"]  # the deprecated name, until release 0.3.0
    assert any("misc.capacity:1" in w and "not a decimal integer" in w for w in result["warnings"])


def test_cgroups_and_check_mode(fs, run_module):
    fs.create_file(f"{CG}/misc.capacity", contents="tdx 63\n")
    fs.create_file(f"{CG}/misc.current", contents="tdx 1\n")
    fs.create_file(f"{CG}/kubepods/misc.current", contents="tdx 1\n")
    fs.create_file(f"{CG}/kubepods/misc.max", contents="tdx max\n")
    result = run_module(tee_capacity_info, {"host_root": "/host", "cgroups": True}, check_mode=True)
    assert result["cgroups"][0]["path"] == "kubepods" and result["cgroups"][0]["max"] == {"tdx": "max"}


def test_bad_cgroup_depth_fails_clearly(fs, run_module):
    result = run_module(tee_capacity_info, {"host_root": "/host", "cgroup_depth": 0})
    assert result["failed"] and "cgroup_depth must be at least 1" in result["msg"]


def test_wrong_type_is_rejected_by_ansible(fs, run_module):
    result = run_module(tee_capacity_info, {"host_root": "/host", "cgroups": "perhaps"})
    assert result["failed"] and "cgroups" in result["msg"]
