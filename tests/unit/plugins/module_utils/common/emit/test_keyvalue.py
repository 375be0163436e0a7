"""emit.keyvalue: a value reads back identically through the readers' line rule, or is refused by name."""

import pytest
from ansible_collections.confidential.tee.plugins.module_utils.attestation.registration import (
    parse_mpa_conf,
    update_mpa_conf,
)
from ansible_collections.confidential.tee.plugins.module_utils.common.emit import EmitError, keyvalue
from hypothesis import given, settings
from hypothesis import strategies as st

HOSTILE = st.text(st.sampled_from(list("ab0:/?=.# \t\n\r\x00\x0b\x7f\u00a0é")) | st.characters(), max_size=12)


@settings(max_examples=200, deadline=None)
@given(HOSTILE)
def test_values_read_back_or_are_refused(value):
    try:
        line = keyvalue.line("proxy url", value, "proxy_url")
    except EmitError as exc:
        assert "proxy_url" in str(exc)
        assert "#" in value or any(
            ch.isspace() or ord(ch) < 0x20 or ord(ch) == 0x7F or 0xD800 <= ord(ch) <= 0xDFFF for ch in value
        )
        return
    assert keyvalue.parse("# head\n" + line + "\nport = 1\n") == [("proxy url", value), ("port", "1")]


def test_integers_are_written_plainly():
    assert keyvalue.line("number_threads", 4, "number_threads") == "number_threads = 4"


@pytest.mark.parametrize("url", ["http://p:3128\nsubscription key = " + "0" * 32, "http://p\r", "http://p #x"])
def test_a_proxy_url_that_would_add_a_setting_is_refused_by_name(url):
    with pytest.raises(EmitError, match="proxy_url"):
        update_mpa_conf(None, {"proxy_type": "manual", "proxy_url": url})


def test_an_ordinary_proxy_url_reads_back_through_the_mpa_rule():
    text = update_mpa_conf(None, {"proxy_type": "manual", "proxy_url": "http://proxy.example:3128/?a=b"})
    assert parse_mpa_conf(text)["settings"] == {"proxy_type": "manual", "proxy_url": "http://proxy.example:3128/?a=b"}


@settings(max_examples=200, deadline=None)
@given(HOSTILE)
def test_pck_settings_read_back_as_the_tool_reads_them_or_are_refused(value):
    """PCKIDRetrievalTool (network_wrapper.cpp) removes every blank of a line and splits at the first '='."""
    try:
        line = keyvalue.pck_setting("user_token", value, "tdx_attestation_pccs_user_token")
    except EmitError as exc:
        assert "tdx_attestation_pccs_user_token" in str(exc) and (value == "" or value not in str(exc))
        return
    assert keyvalue.pck_parse("PCCS_URL=https://p/\n" + line + "\n") == [
        ("PCCS_URL", "https://p/"),
        ("USER_TOKEN", value),
    ]


@pytest.mark.parametrize("token", ["tok\nPCCS_URL=https://evil/", "to ken", "tok\r", "tok\x00"])
def test_a_token_that_would_add_or_change_a_setting_is_refused_without_repeating_it(token):
    with pytest.raises(EmitError, match="tdx_attestation_pccs_user_token") as refused:
        keyvalue.pck_network_setting("https://pccs:8081/sgx/certification/v4/", True, token)
    assert token not in str(refused.value)


def test_the_network_setting_file_reads_back():
    text = keyvalue.pck_network_setting("https://pccs:8081/sgx/certification/v4/", False, "s3cr#t=x")
    assert keyvalue.pck_parse(text) == [
        ("PCCS_URL", "https://pccs:8081/sgx/certification/v4/platforms"),
        ("USE_SECURE_CERT", "FALSE"),
        ("USER_TOKEN", "s3cr#t=x"),
    ]


# qgs.conf edited in place (issue 18): only the owned keys change, as QGS's own line rule sees them.
PACKAGE_CONF = "#set port number\nport = 4050\nnumber_threads = 4\n"


def test_qgs_edit_changes_only_the_owned_keys():
    text = "# admin: keep me\n" + PACKAGE_CONF + "future_key = on\n"
    edited = keyvalue.qgs_edit(text, {"port": None}, {"port": "p"})
    assert edited == "# admin: keep me\n#set port number\nnumber_threads = 4\nfuture_key = on\n"
    assert keyvalue.qgs_edit(edited, {"port": None}, {"port": "p"}) == edited


def test_qgs_edit_sees_a_port_line_the_way_qgs_does():
    # ' po rt = 1' is a port line to QGS (every blank removed); '# port = 1' and 'port' without '=' are not.
    text = " po rt\t= 1\n# port = 9\nport\nport=2\n"
    assert keyvalue.qgs_edit(text, {"port": 4050}, {"port": "p"}) == "port = 4050\n# port = 9\nport\n"


def test_qgs_edit_appends_a_missing_key_and_keeps_a_missing_newline():
    assert keyvalue.qgs_edit("# c", {"port": 4051, "number_threads": 8}, {"port": "p", "number_threads": "n"}) == (
        "# c\nport = 4051\nnumber_threads = 8"
    )


def test_qgs_edit_refuses_a_value_that_would_add_a_line():
    with pytest.raises(EmitError) as raised:
        keyvalue.qgs_edit("", {"port": "1\nnumber_threads = 9"}, {"port": "tdx_attestation_qgs_vsock_port"})
    assert "tdx_attestation_qgs_vsock_port" in str(raised.value)
