"""tee_key_pools: the module returns the plan, and fails a double pool with the planner's message."""

from __future__ import annotations

from ansible_collections.confidential.tee.plugins.modules import tee_key_pools


def test_returns_the_plan_and_its_parts(run_module):
    result = run_module(
        tee_key_pools,
        {
            "nodes": [
                {"name": "tdx-1", "vendor": "intel", "consumers": ["kata", "kubevirt"]},
                {"name": "snp-1", "vendor": "amd"},
            ]
        },
        check_mode=True,
    )
    assert result["failed"] is False and result["changed"] is False
    assert (
        result["plan"]["kata"] == result["kata"] == {"tdx": {"resource": "devices.kubevirt.io/tdx", "nodes": ["tdx-1"]}}
    )
    assert result["plan"]["nodes"]["snp-1"]["mode"] == "none"
    # The plan's keys at the top level are deprecated copies (until release 0.3.0): the same values.
    assert {key: result[key] for key in result["plan"] if key != "warnings"} == {
        key: value for key, value in result["plan"].items() if key != "warnings"
    }
    assert "warnings" not in result["plan"] or result["plan"]["warnings"] == []


def test_double_pool_fails(run_module):
    result = run_module(
        tee_key_pools,
        {
            "nodes": [{"name": "tdx-1", "vendor": "intel", "consumers": ["kata", "kubevirt"], "mode": "nfd"}],
            "rule_name": "kata-tee-keys",
        },
    )
    assert result["failed"] is True
    assert "NodeFeatureRule kata-tee-keys" in result["msg"] and "devices.kubevirt.io/tdx" in result["msg"]


def test_plan_warnings_become_module_warnings(run_module):
    result = run_module(tee_key_pools, {"nodes": [{"name": "snp-vm", "vendor": "amd", "consumers": ["kubevirt"]}]})
    assert any("max-devices" in w for w in result["warnings"])


def test_argument_spec_rejects_unknown_vendors(run_module):
    result = run_module(tee_key_pools, {"nodes": [{"name": "n", "vendor": "arm"}]})
    assert result["failed"] is True and "vendor" in result["msg"]
