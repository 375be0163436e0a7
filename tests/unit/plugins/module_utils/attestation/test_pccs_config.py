"""pccs_config: token hashes as auth.js checks them, node-config's merge, production.json edits, validation."""

from __future__ import annotations

import hashlib

import pytest
from ansible_collections.confidential.tee.plugins.module_utils.attestation.pccs_config import (
    PccsConfigError,
    config_problems,
    effective_config,
    merge,
    render_settings,
    token_hash,
    token_matches,
    update_production,
)

DEFAULT = """{
    "HTTPS_PORT" : 8081,
    "hosts" : "127.0.0.1",
    "uri": "https://api.trustedservices.intel.com/sgx/certification/v4/",
    "ApiKey": "",
    "UserTokenHash" : "",
    "AdminTokenHash" : "",
    "CachingFillMode" : "LAZY",
    "DB_CONFIG" : "sqlite",
    "sqlite" : {"options" : {"dialect": "sqlite", "storage": "pckcache.db"}},
    //"mysql" : { commented out, as in Intel's file
}
"""


def test_token_hash_is_sha512_hex_of_the_utf8_token():
    assert token_hash("abc") == hashlib.sha512(b"abc").hexdigest()
    assert token_hash("abc").startswith("ddaf35a193617aba")  # FIPS 180-2 test vector
    assert token_hash("pässword") == hashlib.sha512("pässword".encode()).hexdigest()


@pytest.mark.parametrize(
    ("configured", "matches"),
    [
        (token_hash("tok"), True),
        (token_hash("tok").upper(), True),
        (token_hash("tok") + "zz", True),  # Buffer.from(hex) stops at the first non-hex pair
        (token_hash("tok")[:-2], False),
        (token_hash("other"), False),
        ("", False),
        (None, False),
        (12, False),
    ],
)
def test_token_matches_like_auth_js(configured, matches):
    assert token_matches("tok", configured) is matches


def test_merge_is_node_configs():
    assert merge({"a": {"b": 1, "c": 2}, "l": [1, 2]}, {"a": {"b": 3}, "l": [9]}) == {"a": {"b": 3, "c": 2}, "l": [9]}


def test_render_hashes_tokens_and_never_keeps_them():
    members = render_settings(
        {"hosts": "0.0.0.0", "DB_CONFIG": "mysql", "mysql": {"database": "pckcache", "username": "u", "options": {}}},
        {"api_key": "a" * 32, "user_token": "user-1", "admin_token": "admin-1", "db_password": "pw"},
    )
    assert members["UserTokenHash"] == token_hash("user-1") and members["AdminTokenHash"] == token_hash("admin-1")
    assert members["mysql"]["password"] == "pw" and members["ApiKey"] == "a" * 32
    assert "user-1" not in str(members) and "admin-1" not in str(members)


@pytest.mark.parametrize(
    ("settings", "secrets", "fragment"),
    [
        ({"HTTPS_PORT": "8081"}, {}, "must be a int"),
        ({"OPENSSL_FIPS_MODE": 1}, {}, "must be a bool"),
        ({"HTTPS_PORT": True}, {}, "must be a int"),
        ({"UserTokenHash": "x"}, {}, "unknown PCCS setting"),
        ({}, {"db_password": "pw"}, "needs the mysql block"),
    ],
)
def test_render_refuses(settings, secrets, fragment):
    with pytest.raises(PccsConfigError) as raised:
        render_settings(settings, secrets)
    assert fragment in str(raised.value)


def test_production_written_over_defaults_with_trailing_commas():
    members = render_settings({"hosts": "0.0.0.0"}, {"api_key": "k" * 32, "user_token": "u", "admin_token": "a"})
    production = update_production('{\n  // mine\n  "LogLevel": "debug",\n}\n', members)
    assert "// mine" in production
    config, problems = effective_config(DEFAULT, production)
    assert problems == [] and config_problems(config) == []
    assert config["hosts"] == "0.0.0.0" and config["LogLevel"] == "debug" and config["HTTPS_PORT"] == 8081
    assert update_production(production, members) == production


@pytest.mark.parametrize(
    ("override", "fragment"),
    [
        ({"HTTPS_PORT": 0}, "HTTPS_PORT"),
        ({"uri": "https://api.trustedservices.intel.com/sgx/certification/v5/"}, "API v3 or v4"),
        ({"CachingFillMode": "EAGER"}, "CachingFillMode"),
        ({"DB_CONFIG": "postgres"}, "sqlite or mysql"),
        ({"DB_CONFIG": "mysql"}, "block is missing"),
        ({"DB_CONFIG": "mysql", "mysql": {"database": "d"}}, "lacks username, password, options"),
        ({"UserTokenHash": "abc"}, "UserTokenHash is not 128 hex"),
        ({"ApiKey": ""}, "ApiKey is empty"),
        ({"LogLevel": "loud"}, "LogLevel"),
        ({"hosts": ""}, "listen on every interface"),
        ({"hosts": "  "}, "listen on every interface"),
        ({"hosts": 0}, "listen on every interface"),
    ],
)
def test_problems_that_stop_pccs_or_its_clients(override, fragment):
    good = {
        "HTTPS_PORT": 8081,
        "uri": "https://api.trustedservices.intel.com/sgx/certification/v4/",
        "CachingFillMode": "LAZY",
        "DB_CONFIG": "sqlite",
        "sqlite": {},
        "UserTokenHash": token_hash("u"),
        "AdminTokenHash": token_hash("a"),
        "ApiKey": "k" * 32,
    }
    assert config_problems(good) == []
    assert any(fragment in problem for problem in config_problems({**good, **override}))


def test_unparsable_layers_stop_pccs():
    config, problems = effective_config(DEFAULT, "{ nope")
    assert config is None and "production.json does not parse" in problems[0]
    _config, problems = effective_config(None, "{}")
    assert "default.json is missing" in problems[0]
