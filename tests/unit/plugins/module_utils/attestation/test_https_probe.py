"""https_probe: a real HTTPS request as QCNL's libcurl makes it, and the host's CA bundle."""

from __future__ import annotations

import socket

from ansible_collections.confidential.tee.plugins.module_utils.attestation.https_probe import host_ca_bundle, request
from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import HostReader


def test_verified_with_the_ca(https_server, pki):
    assert request(https_server + "rootcacrl", True, pki["ca_pem"], 5)["status"] == 200


def test_unknown_ca_is_curl_error_60(https_server):
    result = request(https_server + "rootcacrl", True, None, 5)
    assert result["error_kind"] == "certificate" and "local issuer" in result["error"]


def test_hostname_checked(https_server, pki):
    url = https_server.replace("localhost", "127.0.0.2")
    result = request(url + "rootcacrl", True, pki["ca_pem"], 5)
    assert result["error_kind"] in ("certificate", "refused", "network")


def test_unverified_like_use_secure_cert_false(https_server):
    assert request(https_server + "nothing", False, None, 5)["status"] == 404


def test_refused_and_bad_urls():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    assert request(f"https://127.0.0.1:{port}/", True, None, 2)["error_kind"] == "refused"
    assert request("ftp://x/", True, None, 2)["error_kind"] == "url"
    assert request("https://x:99999/", True, None, 2)["error_kind"] == "url"


def test_ca_bundle_from_the_host_root(tmp_path, pki):
    assert host_ca_bundle(HostReader(str(tmp_path)))[0] is None
    bundle = tmp_path / "etc/pki/tls/certs/ca-bundle.crt"
    bundle.parent.mkdir(parents=True)
    bundle.write_text(pki["ca_pem"])
    pem, path = host_ca_bundle(HostReader(str(tmp_path)))
    assert pem == pki["ca_pem"] and path.endswith("etc/pki/tls/certs/ca-bundle.crt")
