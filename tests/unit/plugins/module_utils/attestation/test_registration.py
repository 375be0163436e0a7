"""registration: the MPA settings file as the agent matches it, and the SgxRegistrationStatus variable."""

from __future__ import annotations

import struct

import pytest
from ansible_collections.confidential.tee.plugins.module_utils.attestation.registration import (
    MpaConfigError,
    parse_mpa_conf,
    redact_mpa,
    registration_status,
    update_mpa_conf,
)

KEY = "0123456789abcdef0123456789ABCDEF"
PACKAGE_FILE = """#subscription key =

#proxy type    = direct
#proxy url   = http://proxy_url:proxy_port

#log level = none|error|warn|info|debug
log level = info
"""


def test_the_packages_file_reads_clean():
    assert parse_mpa_conf(PACKAGE_FILE) == {"settings": {"log_level": "info"}, "invalid_lines": []}


@pytest.mark.parametrize(
    ("line", "settings"),
    [
        (f"subscription key = {KEY}", {"subscription_key": KEY}),
        (f"  SUBSCRIPTION KEY={KEY} # mine", {"subscription_key": KEY}),
        ("proxytype = MANUAL", {"proxy_type": "manual"}),
        ("proxy type = dir", {"proxy_type": "direct"}),
        ("proxy type = nonsense", {"proxy_type": "direct"}),
        ("proxy url = http://proxy:3128", {"proxy_url": "http://proxy:3128"}),
        ("uefi path = /sys/firmware/efi/efivars/", {"uefi_path": "/sys/firmware/efi/efivars/"}),
        ("log level = DEBUG", {"log_level": "debug"}),
    ],
)
def test_lines_as_the_agent_matches_them(line, settings):
    assert parse_mpa_conf(line)["settings"] == settings


@pytest.mark.parametrize(
    ("line", "shown"),
    [
        # The issue 16 leak: a misspelled key line held the subscription key and was quoted whole.
        ("subscriptionkey = " + KEY, "subscriptionkey = <redacted>"),
        ("subscription_key = " + KEY, "subscription_key = <redacted>"),
        ("uefi path = relative/", "uefi path = <redacted>"),
        ("pccs_url = https://user:pass@x", "pccs_url = <redacted>"),
        ("junk", "<a line without a setting name, redacted>"),
        (KEY, "<a line without a setting name, redacted>"),
    ],
)
def test_other_lines_are_format_errors_named_never_quoted(line, shown):
    assert parse_mpa_conf(line) == {"settings": {}, "invalid_lines": [(1, shown)]}


def test_invalid_subscription_key_lines_are_not_echoed():
    parsed = parse_mpa_conf("subscription key = 12345")
    assert parsed["invalid_lines"] == [(1, "subscription key = <redacted>")]


@pytest.mark.parametrize("line", ["subscription_key = " + KEY, "  SUBSCRIPTION-KEY=" + KEY, "subscriptionkey=" + KEY])
def test_redaction_catches_every_spelling_of_the_key_line(line):
    assert KEY not in redact_mpa(line)


def test_update_keeps_comments_replaces_and_appends():
    text = update_mpa_conf(PACKAGE_FILE, {"subscription_key": KEY, "proxy_type": "manual", "log_level": "warn"})
    lines = text.splitlines()
    # The package's commented examples stay as they were; settings replace live lines or are appended.
    assert lines[:4] == PACKAGE_FILE.splitlines()[:4]
    assert lines[-2:] == [f"subscription key = {KEY}", "proxy type = manual"]
    assert "log level = warn" in lines and "log level = info" not in lines
    assert "#log level = none|error|warn|info|debug" in lines
    assert update_mpa_conf(text, {"subscription_key": KEY, "proxy_type": "manual", "log_level": "warn"}) == text
    assert parse_mpa_conf(text)["invalid_lines"] == []


def test_none_comments_a_setting_out():
    text = update_mpa_conf("log level = info\n", {"log_level": None})
    assert text == "#log level = info\n"


@pytest.mark.parametrize(
    ("settings", "fragment"),
    [
        ({"subscription_key": "xyz"}, "32 hex digits"),
        ({"proxy_type": "auto"}, "default, direct or manual"),
        ({"log_level": "trace"}, "none, error"),
        ({"pccs_url": "x"}, "unknown MPA setting"),
        ({"proxy_url": 5}, "must be a string"),
    ],
)
def test_update_refuses(settings, fragment):
    with pytest.raises(MpaConfigError) as raised:
        update_mpa_conf("", settings)
    assert fragment in str(raised.value) and "xyz" not in str(raised.value)


def test_redaction():
    assert (
        redact_mpa(f"subscription key = {KEY}\nlog level = info") == "subscription key = <redacted>\nlog level = info"
    )


def efivar(status, error):
    return struct.pack("<IHHHB", 0x7, 1, 3, status, error)


@pytest.mark.parametrize(
    ("data", "complete", "error"),
    [
        (efivar(0x1, 0), True, "success"),
        (efivar(0x3, 0), True, "success"),
        (efivar(0x0, 0x87), False, "unauthorized at the registration server: check the subscription key"),
        (efivar(0x0, 0xA3), False, "registration server: processor package not found"),
        (efivar(0x2, 0x99), False, "unknown error code 0x99"),
    ],
)
def test_status_variable_decoded(data, complete, error):
    status = registration_status(data)
    assert status["known"] and status["registration_complete"] is complete and status["error"] == error


@pytest.mark.parametrize(("data", "reason"), [(None, "no SgxRegistrationStatus"), (b"\x07\x00\x00\x00\x01", "5 bytes")])
def test_status_unknown_says_why(data, reason):
    status = registration_status(data)
    assert not status["known"] and reason in status["reason"]
