"""The tdx_attestation_check module through main(): inputs, failing and reporting modes."""

from __future__ import annotations

import pytest
from ansible_collections.confidential.tee.plugins.modules import tdx_attestation_check


@pytest.fixture
def tree(tmp_path):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/qgs.conf").write_text("port = 0\n")
    (tmp_path / "etc/sgx_default_qcnl.conf").write_text('{"pccs_url": "https://127.0.0.1:1/sgx/certification/v4/"}')
    return tmp_path


def test_broken_chain_fails_with_every_failing_link_and_its_fix(run_module, tree):
    result = run_module(tdx_attestation_check, {"host_root": str(tree), "dcap_version": "1.26", "timeout": 2})
    assert result["failed"] and result["summary"]["ok"] is False
    assert "qgs_config: consumers need the Unix socket" in result["msg"] and result["verdict"] == "FAIL"
    assert "qgs_config: remove every 'port' line" in result["remediation"]
    assert "pccs_reachable" in result["msg"] and result["changed"] is False
    assert result["report"][0].startswith("PASS qgs_transport: transport unix: Unix socket")
    assert (
        result["report"][1]
        == "PASS dcap_version: DCAP 1.26 (given): QGS behaves as 1.26+ (values cut at 255 characters)"
    )


def test_report_only(run_module, tree):
    args = {"host_root": str(tree), "dcap_version": "1.23", "fail_on_fail": False, "timeout": 2, "registration": "none"}
    result = run_module(tdx_attestation_check, args)
    assert result["failed"] is False and result["summary"]["fail"] >= 1
    links = {item["name"]: item["status"] for item in result["checks"]}
    assert all(item["link"] == item["name"] for item in result["checks"])  # link: deprecated until 0.3.0
    assert all(item["ok"] == (item["status"] != "FAIL") for item in result["checks"])
    assert links["qgs_config"] == "PASS" and links["registration"] == "SKIP"  # 1.23: port = 0 is the socket


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        ({"consumers": "kata"}, "consumers must be a list"),
        ({"consumers": ["libvirt"]}, "kubevirt and kata only"),
        ({"extra_clients": [{"name": "x", "uid": 1}]}, "lacks gid, groups"),
        ({"extra_clients": [{"name": "x", "uid": -1, "gid": 0, "groups": []}]}, "integers"),
        ({"timeout": 0}, "timeout must be between"),
    ],
)
def test_bad_inputs(run_module, tree, args, fragment):
    result = run_module(tdx_attestation_check, {"host_root": str(tree), **args})
    assert result["failed"] and fragment in result["msg"]


def test_tokens_are_not_echoed(run_module, tree):
    args = {"host_root": str(tree), "dcap_version": "1.26", "user_token": "tok-9931", "fail_on_fail": False}
    result = run_module(tdx_attestation_check, {**args, "timeout": 2})
    assert "tok-9931" not in str(result)


def test_result_feeds_tee_host_infos_preflight(run_module, tree):
    from ansible_collections.confidential.tee.plugins.module_utils.host.preflight import attestation_section

    broken = run_module(tdx_attestation_check, {"host_root": str(tree), "dcap_version": "1.26", "timeout": 2})
    section = attestation_section(broken)
    check = section["checks"][0]
    assert (
        check["verdict"] == "FAIL"
        and "qgs_config" in check["detail"]
        and "remove every 'port' line" in check["remediation"]
    )
