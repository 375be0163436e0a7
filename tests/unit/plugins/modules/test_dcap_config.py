"""The dcap_config module through main(): check mode, diffs without secrets, restarts, idempotence."""

from __future__ import annotations

import hashlib
import json
import os

import pytest
from ansible_collections.confidential.tee.plugins.modules import dcap_config

DEFAULT = (
    '{"HTTPS_PORT": 8081, "hosts": "127.0.0.1", "uri": "https://api.trustedservices.intel.com/sgx/certification/v4/",'
    ' "ApiKey": "", "UserTokenHash": "", "AdminTokenHash": "", "CachingFillMode": "LAZY", "DB_CONFIG": "sqlite",'
    ' "sqlite": {}}'
)
SECRETS = {"api_key": "0123456789abcdef0123456789abcdef", "user_token": "u-secret-1", "admin_token": "a-secret-2"}


@pytest.fixture
def tree(tmp_path):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/passwd").write_text(f"root:x:0:0::/root:/bin/sh\npccs:x:{os.getuid()}:0::/:/bin/sh\n")
    (tmp_path / "etc/group").write_text(f"root:x:0:\npccs:x:{os.getgid()}:\n")
    (tmp_path / "opt/intel/sgx-dcap-pccs/config").mkdir(parents=True)
    (tmp_path / "opt/intel/sgx-dcap-pccs/config/default.json").write_text(DEFAULT)
    return tmp_path


def test_qgs_check_mode_then_write_then_nothing(run_module, tree):
    args = {"host_root": str(tree), "component": "qgs", "dcap_version": "1.25", "_ansible_diff": True}
    planned = run_module(dcap_config, args, check_mode=True)
    assert planned["changed"] and not (tree / "etc/qgs.conf").exists()
    assert planned["restart"] == ["daemon-reload", "qgsd.service"]
    assert planned["qgs"]["era"] == "1.24-1.25" and planned["qgs"]["socket_group"] == "107"
    assert any("RuntimeDirectoryMode=0755" in d["after"] for d in planned["diff"])
    done = run_module(dcap_config, args)
    assert done["changed"] and (tree / "etc/qgs.conf").exists() and done["effective"]["transport"] == "unix"
    again = run_module(dcap_config, args)
    assert again["changed"] is False and again["restart"] == [] and "diff" in again and again["diff"] == []


def test_pccs_secrets_never_in_the_result(run_module, tree):
    args = {
        "host_root": str(tree),
        "component": "pccs",
        "settings": {"hosts": "0.0.0.0"},
        "secrets": SECRETS,
        "_ansible_diff": True,
    }
    result = run_module(dcap_config, args)
    shown = json.dumps(result)
    hashes = [hashlib.sha512(v.encode()).hexdigest() for v in SECRETS.values()]
    assert result["changed"] and result["restart"] == ["pccs.service"]
    assert not [value for value in [*SECRETS.values(), *hashes] if value in shown]
    assert (
        result["effective"]["UserTokenHash"] == "<redacted>" and '"ApiKey": "<redacted>"' in result["diff"][0]["after"]
    )
    assert (tree / "opt/intel/sgx-dcap-pccs/config/production.json").stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize(
    ("args", "fragment", "option"),
    [
        ({"component": "qgs", "consumers": "kubevirt,kata"}, "consumers must be a list", "consumers"),
        ({"component": "qgs", "dcap_version": "2.0"}, "not a DCAP release", "dcap_version"),
        ({"component": "qgs", "dcap_version": "1.26", "transport": "vsock"}, "KubeVirt passes only", "transport"),
        ({"component": "qgs", "dcap_version": "1.26", "socket_group": "a b"}, "not a group name", "socket_group"),
        (
            {
                "component": "qgs",
                "dcap_version": "1.14",
                "transport": "vsock",
                "consumers": ["kata"],
                "number_threads": 4,
            },
            "no thread setting",
            "number_threads",
        ),
        ({"component": "pccs", "secrets": {"api_key": "k" * 32}}, "UserTokenHash is not 128 hex", None),
        ({"component": "pccs", "settings": {"Bogus": 1}}, "unknown PCCS setting", "settings.Bogus"),
        ({"component": "qcnl", "settings": {"pccs_url": "https://x/v4"}}, "ending in '/'", "settings.pccs_url"),
        ({"component": "mpa", "secrets": {"subscription_key": "short"}}, "32 hex digits", "secrets.subscription_key"),
        ({"component": "mpa", "settings": {"log_level": "loud"}}, "log_level must be one of", "settings.log_level"),
    ],
)
def test_refusals_say_what_and_how(run_module, tree, args, fragment, option):
    result = run_module(dcap_config, {"host_root": str(tree), **args})
    assert result["failed"] and fragment in result["msg"] and result.get("files", []) == []
    # The option the value came in as, for the action plugin to name the role's variable (module_refusal).
    assert result.get("refused_option") == option
    assert "short" not in result["msg"]
    assert sorted(p.name for p in (tree / "etc").iterdir()) == ["group", "passwd"]  # nothing written


def test_host_root_must_exist(run_module, tmp_path):
    result = run_module(dcap_config, {"host_root": str(tmp_path / "nope"), "component": "qcnl"})
    assert result["failed"] and "is not a directory" in result["msg"]
