"""kata_initdata: the module around module_utils.cluster.initdata (results, warnings, exclusive options)."""

from __future__ import annotations

import hashlib

from ansible_collections.confidential.tee.plugins.modules import kata_initdata


def test_builds_and_warns(run_module):
    result = run_module(
        kata_initdata, {"kbs_url": "http://kbs:8080", "policy_allow": ["ReadStreamRequest"]}, check_mode=True
    )
    assert result["failed"] is False and result["changed"] is False
    assert result["digest"] == hashlib.sha256(result["toml"].encode()).hexdigest()
    assert result["pcr8"] == hashlib.sha256(b"\0" * 32 + bytes.fromhex(result["digest"])).hexdigest()
    warnings = " ".join(result["warnings"])
    assert "plain HTTP" in warnings and "allows ReadStreamRequest" in warnings


def test_policy_rego_excludes_allow_and_deny(run_module):
    result = run_module(kata_initdata, {"policy_rego": "package agent_policy\n", "policy_deny": ["ExecProcessRequest"]})
    assert result["failed"] is True and "mutually exclusive" in result["msg"]


def test_bad_request_names_fail_with_a_suggestion(run_module):
    result = run_module(kata_initdata, {"policy_deny": ["ExecProcessRequests"]})
    assert result["failed"] is True and "did you mean ExecProcessRequest" in result["msg"]
