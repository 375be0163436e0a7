"""qcnl_config: the QCNL file as QCNL reads it (wrong types ignored, fallbacks), and edits keeping comments."""

from __future__ import annotations

import pytest
from ansible_collections.confidential.tee.plugins.module_utils.attestation import jsonc
from ansible_collections.confidential.tee.plugins.module_utils.attestation.qcnl_config import (
    DEFAULTS,
    QcnlConfigError,
    check_settings,
    qcnl_effective,
    qcnl_warnings,
    update_qcnl,
)

FILE = """{
  // PCCS server address
  "pccs_url": "https://pccs.example:8081/sgx/certification/v4/"
  // To accept insecure HTTPS certificate, set this option to false
  ,"use_secure_cert": false
  ,"retry_times": 6
  ,"pck_cache_expire_hours": 5000
}
"""


def test_values_and_caps():
    view = qcnl_effective(FILE)
    settings = view["settings"]
    assert view["format"] == "json" and view["problems"] == []
    assert settings["pccs_url"] == "https://pccs.example:8081/sgx/certification/v4/"
    assert settings["collateral_service"] == settings["pccs_url"]
    assert settings["use_secure_cert"] is False and settings["retry_times"] == 6
    assert settings["pck_cache_expire_hours"] == 2160  # CACHE_MAX_EXPIRY_HOURS


def test_missing_file_means_defaults_and_says_so():
    view = qcnl_effective(None)
    assert view["settings"]["pccs_url"] == DEFAULTS["pccs_url"] and "missing" in view["problems"][0]


@pytest.mark.parametrize(
    ("member", "fragment"),
    [
        ('"use_secure_cert": "false"', "use_secure_cert = 'false' is ignored"),
        ('"retry_times": 6.0', "retry_times = 6.0 is ignored"),
        ('"retry_times": 3000000000', "retry_times = 3000000000 is ignored"),
        ('"pccs_url": 8081', "pccs_url = 8081 is ignored"),
        ('"local_cache_only": 1', "local_cache_only = 1 is ignored"),
    ],
)
def test_wrong_types_are_ignored_like_rapidjson_does(member, fragment):
    view = qcnl_effective("{" + member + "}")
    assert any(fragment in problem for problem in view["problems"])


def test_bad_tcb_update_type_falls_back_to_defaults():
    view = qcnl_effective('{"pccs_url": "https://p:8081/sgx/certification/v4/", "tcb_update_type": "late"}')
    assert view["format"] == "legacy" and view["settings"]["pccs_url"] == DEFAULTS["pccs_url"]
    assert "rejects the JSON file" in view["problems"][0]


def test_tcb_update_type_case_insensitive():
    assert qcnl_effective('{"tcb_update_type": "EARLY"}')["settings"]["tcb_update_type"] == "early"


def test_invalid_json_uses_the_legacy_reader():
    view = qcnl_effective("PCCS_URL=https://legacy:8081/sgx/certification/v4/\nUSE_SECURE_CERT=FALSE\nRETRY_TIMES=3x\n")
    assert view["format"] == "legacy"
    assert view["settings"]["pccs_url"] == "https://legacy:8081/sgx/certification/v4/"
    assert view["settings"]["use_secure_cert"] is False and view["settings"]["retry_times"] == 3


def test_broken_json_is_defaults_with_the_parse_error():
    view = qcnl_effective('{"pccs_url": "https://p:8081/sgx/certification/v4/",}')
    assert view["settings"]["pccs_url"] == DEFAULTS["pccs_url"]
    assert "trailing comma" in view["problems"][0] and "defaults" in view["problems"][0]


def test_duplicate_keys_reported_first_used():
    view = qcnl_effective('{"retry_times": 1, "retry_times": 2}')
    assert view["settings"]["retry_times"] == 1 and "more than once" in view["problems"][0]


def test_update_keeps_comments_and_unmanaged_keys():
    text = update_qcnl(FILE, {"use_secure_cert": True, "retry_delay": 10, "retry_times": None})
    assert "// To accept insecure HTTPS certificate" in text
    settings = qcnl_effective(text)["settings"]
    assert settings["use_secure_cert"] is True and settings["retry_delay"] == 10 and settings["retry_times"] == 0
    assert settings["pck_cache_expire_hours"] == 2160
    assert update_qcnl(text, {"use_secure_cert": True, "retry_delay": 10}) == text


def test_update_creates_a_missing_file():
    text = update_qcnl(None, {"pccs_url": "https://p:8081/sgx/certification/v4/"})
    assert qcnl_effective(text)["settings"]["pccs_url"] == "https://p:8081/sgx/certification/v4/"


def test_update_refuses_a_file_it_cannot_read():
    with pytest.raises(jsonc.JsoncError):
        update_qcnl('{"a": 1,}', {"retry_times": 1})


@pytest.mark.parametrize(
    ("settings", "fragment"),
    [
        ({"pccs_url": "https://p:8081/sgx/certification/v4"}, "ending in '/'"),
        ({"pccs_url": "p:8081/"}, "http(s) URL"),
        ({"use_secure_cert": "yes"}, "must be a JSON bool"),
        ({"retry_times": 1.5}, "must be a JSON int"),
        ({"tcb_update_type": "late"}, "early or standard"),
        ({"pccs_api_version": "4.0"}, "'3.0' or '3.1'"),
        ({"pccs_uri": "x"}, "unknown QCNL setting"),
        ({"pccs_url": ""}, "QCNL setting pccs_url is empty"),
        # RapidJSON stores 2**31 as int64: neither IsInt() nor IsDouble(), so qcnl_config.cpp ignores it.
        ({"pck_cache_expire_hours": 2**31}, "within int32"),
        ({"verify_collateral_cache_expire_hours": -(2**31) - 1}, "within int32"),
    ],
)
def test_settings_qcnl_would_misread_are_refused(settings, fragment):
    with pytest.raises(QcnlConfigError) as raised:
        check_settings(settings)
    assert fragment in str(raised.value)
    assert raised.value.option == f"settings.{next(iter(settings))}"  # the key of the module's settings option


def test_int32_limit_of_expiry_hours_as_qcnl_reads_them():
    check_settings({"pck_cache_expire_hours": 2**31 - 1})
    check_settings({"pck_cache_expire_hours": 3e9})  # a JSON double: taken (then capped at 2160)
    view = qcnl_effective('{"pck_cache_expire_hours": 3000000000}')
    assert view["settings"]["pck_cache_expire_hours"] == 0 and "ignored by QCNL" in view["problems"][0]
    assert qcnl_effective('{"pck_cache_expire_hours": 3000000000.0}')["settings"]["pck_cache_expire_hours"] == 2160


def test_empty_pccs_url_in_a_file_is_a_problem_and_insecure_cert_a_warning():
    assert "pccs_url is empty" in qcnl_effective('{"pccs_url": ""}')["problems"][0]
    insecure = qcnl_effective(FILE)["settings"]
    assert "use_secure_cert is false" in qcnl_warnings(insecure)[0]
    assert qcnl_warnings(DEFAULTS) == []
