"""attestation_check: the chain on a host tree with a real socket and a real HTTPS PCCS, link by link."""

from __future__ import annotations

import json
import os
import shutil
import struct
import tempfile
from pathlib import Path

import pytest
from ansible_collections.confidential.tee.plugins.module_utils.attestation.attestation_check import (
    ChainRequest,
    check_chain,
    report_lines,
    summarize,
)
from ansible_collections.confidential.tee.plugins.module_utils.attestation.pccs_config import token_hash
from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import HostReader

PCCS_UID = 991 if os.geteuid() == 0 else os.geteuid()
STATUS_VAR = "sys/firmware/efi/efivars/SgxRegistrationStatus-f236c5dc-a491-4bbe-bcdd-88885770df45"
DEFAULT_JSON = {
    "HTTPS_PORT": 8081,
    "hosts": "127.0.0.1",
    "uri": "https://api.trustedservices.intel.com/sgx/certification/v4/",
    "ApiKey": "",
    "UserTokenHash": "",
    "AdminTokenHash": "",
    "CachingFillMode": "LAZY",
    "DB_CONFIG": "sqlite",
    "sqlite": {"options": {"storage": "pckcache.db"}},
}


@pytest.fixture
def host(https_server, pki, unix_listener):
    """A healthy TDX host tree (DCAP 1.26): socket 0660 root:107, QCNL at the test PCCS, trusted CA, PCCS files."""
    root = Path(tempfile.mkdtemp(prefix="tee-chain-", dir="/tmp"))
    os.chmod(root, 0o755)
    (root / "var/lib/dpkg").mkdir(parents=True)
    (root / "var/lib/dpkg/status").write_text("Package: tdx-qgs\nStatus: install ok installed\nVersion: 1.26.100.1\n")
    (root / "var/run").symlink_to("/run")
    (root / "etc/ssl/certs").mkdir(parents=True)
    (root / "etc/ssl/certs/ca-certificates.crt").write_text(pki["ca_pem"])
    (root / "etc/qgs.conf").write_text("number_threads = 4\n")
    (root / "etc/group").write_text("root:x:0:\nqgsd:x:997:\n")
    qcnl = f'{{\n  // test\n  "pccs_url": "{https_server}"\n  ,"use_secure_cert": true\n}}\n'
    (root / "etc/sgx_default_qcnl.conf").write_text(qcnl)
    socket_path = root / "run/tdx-qgs/qgs.socket"
    unix_listener(socket_path)
    os.chmod(socket_path.parent, 0o755)
    os.chmod(socket_path, 0o660)
    if os.geteuid() == 0:
        os.chown(socket_path, 0, 107)
    pccs = root / "opt/intel/sgx-dcap-pccs"
    (pccs / "config").mkdir(parents=True)
    (pccs / "ssl_key").mkdir()
    (pccs / "config/default.json").write_text(json.dumps(DEFAULT_JSON))
    production = {"ApiKey": "k" * 32, "UserTokenHash": token_hash("user-t"), "AdminTokenHash": token_hash("admin-t")}
    (pccs / "config/production.json").write_text(json.dumps(production))
    os.chmod(pccs / "config/production.json", 0o600)
    shutil.copy(pki["key"], pccs / "ssl_key/private.pem")
    os.chmod(pccs / "ssl_key/private.pem", 0o600)
    shutil.copy(pki["cert"], pccs / "ssl_key/file.crt")
    # qgsd.service with Intel's DCAP 1.26 socket.conf and ours after it (what the role leaves).
    (root / "lib/systemd/system").mkdir(parents=True)
    (root / "lib/systemd/system/qgsd.service").write_text("[Service]\nUser=qgsd\nExecStart=/opt/intel/tdx-qgs/qgs\n")
    dropins = root / "etc/systemd/system/qgsd.service.d"
    dropins.mkdir(parents=True)
    (dropins / "socket.conf").write_text("[Service]\nRuntimeDirectory=tdx-qgs\nRuntimeDirectoryMode=0755\nUMask=0117\n")
    (dropins / "zz-confidential-tee.conf").write_text("[Service]\nRuntimeDirectory=tdx-qgs\nUMask=0077\n")
    # The PCCS service user, as the host's own passwd names it (the key must be readable by it).
    (root / "etc/passwd").write_text(f"root:x:0:0::/root:/bin/sh\npccs:x:{PCCS_UID}:{PCCS_UID}::/opt:/sbin/nologin\n")
    if os.geteuid() == 0:
        os.chown(pccs / "ssl_key/private.pem", PCCS_UID, PCCS_UID)
    yield root, https_server
    shutil.rmtree(root)


def run(root, url, **options):
    request = ChainRequest(expect_pccs_url=url, timeout=5, **options)
    results = check_chain(request, HostReader(str(root)))
    return {item["link"]: item for item in results}, results


def statuses(checks):
    return {link: item["status"] for link, item in checks.items()}


def test_healthy_chain(host):
    root, url = host
    checks, results = run(root, url, pccs_local=True, user_token="user-t", admin_token="admin-t")
    assert statuses(checks) == {
        "qgs_transport": "PASS",
        "dcap_version": "PASS",
        "qgs_config": "PASS",
        "qgs_unit": "PASS",
        "qgs_socket": "PASS",
        "socket_access:kubevirt": "PASS" if os.geteuid() == 0 else "FAIL",
        "socket_access:kata": "PASS",
        "qgs_vsock": "SKIP",
        "qcnl_cache": "SKIP",
        "qcnl_config": "PASS",
        "pccs_tls": "PASS",
        "pccs_reachable": "PASS",
        "pccs_config": "PASS",
        "pccs_tokens": "PASS",
        "registration": "SKIP",
    }
    assert "group 107" in checks["qgs_socket"]["message"]
    assert "the kernel's permission rules" in checks["socket_access:kubevirt"]["message"]  # mounted root: model only
    assert summarize(results)["ok"] is (os.geteuid() == 0)
    assert report_lines(results)[1].startswith("PASS dcap_version: DCAP 1.26 (dpkg: tdx-qgs 1.26.100.1)")


@pytest.mark.parametrize(
    ("version", "conf", "status", "fragment"),
    [
        ("1.26", "port = 0\n", "FAIL", "DCAP 1.26+ use vsock port 0"),
        ("1.23", "port = 0\n", "PASS", "Unix socket"),
        ("auto", "port = 0\n", "FAIL", "1.24-1.25"),
        ("auto", "# no port\n", "PASS", "on every DCAP release"),
        ("1.26", "port = 4050 # vsock\n", "FAIL", "QGS exits at start"),
    ],
)
def test_qgs_config_per_release(host, version, conf, status, fragment):
    root, url = host
    (root / "etc/qgs.conf").write_text(conf)
    if version == "auto":
        (root / "var/lib/dpkg/status").unlink()
    checks, _results = run(root, url, dcap_version=version)
    assert checks["qgs_config"]["status"] == status and fragment in checks["qgs_config"]["message"]
    if status == "FAIL" and "vsock" in fragment:
        assert "remove every 'port' line" in checks["qgs_config"]["fix"]


def test_unknown_version_is_a_failure_with_the_fix(host):
    root, url = host
    (root / "var/lib/dpkg/status").unlink()
    checks, _results = run(root, url)
    assert checks["dcap_version"]["status"] == "FAIL" and "set dcap_version" in checks["dcap_version"]["fix"]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to set owners")
def test_socket_access_names_what_the_kernel_refuses(host):
    root, url = host
    os.chown(root / "run/tdx-qgs/qgs.socket", 0, 997)
    checks, _results = run(root, url)
    kubevirt = checks["socket_access:kubevirt"]
    assert kubevirt["status"] == "FAIL" and "no write permission on the socket" in kubevirt["message"]
    assert "group 107 and mode 0660" in kubevirt["fix"] and "997 (qgsd)" in checks["qgs_socket"]["message"]
    assert checks["socket_access:kata"]["status"] == "PASS"
    os.chown(root / "run/tdx-qgs/qgs.socket", 0, 107)
    os.chmod(root / "run/tdx-qgs", 0o700)
    checks, _results = run(root, url)
    assert "no search permission on directory /run/tdx-qgs" in checks["socket_access:kubevirt"]["message"]


def test_missing_socket(host):
    root, url = host
    (root / "run/tdx-qgs/qgs.socket").unlink()
    checks, _results = run(root, url)
    assert checks["qgs_socket"]["status"] == "FAIL" and "systemctl status qgsd" in checks["qgs_socket"]["fix"]
    assert checks["socket_access:kubevirt"]["status"] == "SKIP"


def test_untrusted_certificate_with_use_secure_cert(host):
    root, url = host
    (root / "etc/ssl/certs/ca-certificates.crt").write_text("")
    checks, _results = run(root, url)
    assert checks["pccs_tls"]["status"] == "FAIL" and "curl error 60" in checks["pccs_tls"]["message"]
    assert "update-ca-certificates" in checks["pccs_tls"]["fix"]
    assert checks["pccs_reachable"]["status"] == "FAIL" and "see pccs_tls" in checks["pccs_reachable"]["fix"]
    qcnl = root / "etc/sgx_default_qcnl.conf"
    qcnl.write_text(qcnl.read_text().replace('"use_secure_cert": true', '"use_secure_cert": false'))
    checks, _results = run(root, url)
    assert checks["pccs_tls"]["status"] == "PASS" and "not for production" in checks["pccs_tls"]["message"]
    assert checks["pccs_reachable"]["status"] == "PASS"


def test_pccs_url_left_at_localhost_without_a_pccs(host):
    root, _url = host
    qcnl = root / "etc/sgx_default_qcnl.conf"
    qcnl.write_text('{"pccs_url": "https://localhost:1/sgx/certification/v4/"}')
    checks, _results = run(root, None)
    assert checks["pccs_reachable"]["status"] == "FAIL"
    assert "connection refused" in checks["pccs_reachable"]["message"]
    assert "point it at your PCCS" in checks["pccs_reachable"]["fix"]


@pytest.mark.parametrize(
    ("qcnl", "fragment"),
    [
        ('{"pccs_url": "https://p:8081/sgx/certification/v4/", "tcb_update_type": "late"}', "tcb_update_type"),
        ('{"pccs_url": "https://p:8081/sgx/certification/v4"}', "does not end in '/'"),
        ('{"use_secure_cert": "no"}', "is ignored by QCNL"),
        ('{"pccs_url": "https://p:8081/sgx/certification/v4/",}', "not valid JSON"),
    ],
)
def test_qcnl_problems(host, qcnl, fragment):
    root, _url = host
    (root / "etc/sgx_default_qcnl.conf").write_text(qcnl)
    checks, _results = run(root, None)
    assert checks["qcnl_config"]["status"] == "FAIL" and fragment in checks["qcnl_config"]["message"]


def test_expected_pccs_url(host):
    root, _url = host
    checks, _results = run(root, "https://pccs.example:8081/sgx/certification/v4/")
    assert (
        checks["qcnl_config"]["status"] == "FAIL"
        and "expected https://pccs.example" in checks["qcnl_config"]["message"]
    )


def test_pccs_tokens_and_files(host):
    root, url = host
    checks, _results = run(root, url, pccs_local=True, user_token="wrong", admin_token="admin-t")
    assert checks["pccs_tokens"]["status"] == "FAIL" and checks["pccs_tokens"]["message"].startswith("UserTokenHash")
    assert "wrong" not in json.dumps(checks)
    pccs = root / "opt/intel/sgx-dcap-pccs"
    os.chmod(pccs / "config/production.json", 0o644)
    (pccs / "config/local.json").write_text("{}")
    (pccs / "ssl_key/private.pem").unlink()
    checks, _results = run(root, url, pccs_local=True)
    message = checks["pccs_config"]["message"]
    assert checks["pccs_config"]["status"] == "FAIL"
    assert "mode 0644" in message and "local.json exists" in message and "private.pem is missing" in message
    assert checks["pccs_tokens"]["status"] == "SKIP"


def test_qcnl_cache_broken_by_umask_0117(host):
    root, url = host
    cache = root / "var/opt/qgsd/.dcap-qcnl"
    cache.mkdir(parents=True)
    os.chmod(cache, 0o660)
    checks, _results = run(root, url)
    assert checks["qcnl_cache"]["status"] == "FAIL" and "chmod u+x,g-w" in checks["qcnl_cache"]["fix"]


@pytest.mark.parametrize(
    ("data", "marker", "mode", "status", "fragment"),
    [
        (struct.pack("<IHHHB", 7, 1, 3, 1, 0), None, "auto", "PASS", "registered"),
        (struct.pack("<IHHHB", 7, 1, 3, 0, 0x82), None, "mpa", "FAIL", "network error"),
        (None, "2026-01-01T00:00:00Z with https://p (PCKIDRetrievalTool)", "auto", "PASS", "PCK ID retrieval"),
        (None, None, "pck_retrieval", "FAIL", "status unknown"),
        (None, None, "auto", "SKIP", "status unknown"),
        (None, None, "none", "SKIP", "not managed"),
    ],
)
def test_registration(host, data, marker, mode, status, fragment):
    root, url = host
    if data:
        (root / STATUS_VAR).parent.mkdir(parents=True)
        (root / STATUS_VAR).write_bytes(data)
    if marker:
        (root / "var/lib/confidential-tee").mkdir(parents=True)
        (root / "var/lib/confidential-tee/pck-registration").write_text(marker + "\n")
    checks, _results = run(root, url, registration=mode)
    assert checks["registration"]["status"] == status and fragment in checks["registration"]["message"]


def test_vsock_needs_loopback_for_kata(host):
    root, url = host
    (root / "etc/qgs.conf").write_text("port = 4050\n")
    checks, _results = run(root, url, transport="vsock", consumers=["kata"])
    assert checks["qgs_config"]["status"] == "PASS"
    assert checks["vsock_loopback"]["status"] == "FAIL" and "modprobe vsock_loopback" in checks["vsock_loopback"]["fix"]
    assert checks["qgs_vsock"]["status"] == "SKIP" and "qgs_socket" in checks
    (root / "sys/module/vsock_loopback").mkdir(parents=True)
    checks, _results = run(root, url, transport="vsock", consumers=["kata"])
    assert checks["vsock_loopback"]["status"] == "PASS"


@pytest.mark.parametrize(
    ("version", "transport", "fragment"),
    [("1.14", "unix", "vsock only"), ("1.14", "both", "vsock only"), ("1.12", "unix", "ships no QGS")],
)
def test_release_without_the_transport_fails_instead_of_passing(host, version, transport, fragment):
    # The hostile tester's case: 1.14 with unix/both passed because qgs.conf alone looked right.
    root, url = host
    checks, results = run(root, url, dcap_version=version, transport=transport)
    assert checks["dcap_version"]["status"] == "FAIL" and fragment in checks["dcap_version"]["message"]
    assert checks["qgs_config"]["status"] == "FAIL"
    assert not summarize(results)["ok"]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to set owners")
def test_pccs_key_unreadable_by_the_service_user_on_a_mounted_root(host):
    # The DaemonSet form: the role ran as root in a container and left the key root:root 0600.
    root, url = host
    os.chown(root / "opt/intel/sgx-dcap-pccs/ssl_key/private.pem", 0, 0)
    checks, _results = run(root, url, pccs_local=True)
    assert checks["pccs_config"]["status"] == "FAIL"
    assert "cannot be read by pccs (uid 991)" in checks["pccs_config"]["message"]


@pytest.mark.parametrize(
    ("hostname", "name", "listed"),
    [
        ("", "local.json", True),
        ("", "local-production.yaml", True),
        ("", "production.yml", True),
        ("", "production.js", False),  # merged before production.json: cannot override it
        ("tdx-7.example.com\n", "tdx-7.json", True),
        ("tdx-7.example.com\n", "tdx-7.example.com-production.json5", True),
        ("tdx-7.example.com\n", "tdx-8.json", False),
        ("", "tdx-8.json", True),  # host name unknown: it may be this host's
        ("", "custom-environment-variables.json", False),
    ],
)
def test_pccs_config_files_that_override_production_json(host, hostname, name, listed):
    root, url = host
    (root / "etc/hostname").write_text(hostname)
    (root / "opt/intel/sgx-dcap-pccs/config" / name).write_text("{}")
    checks, _results = run(root, url, pccs_local=True)
    assert (f"config/{name} exists and overrides production.json" in checks["pccs_config"]["message"]) is listed


def test_qgs_unit_fails_with_intels_126_dropin_alone(host):
    root, url = host
    (root / "etc/systemd/system/qgsd.service.d/zz-confidential-tee.conf").unlink()
    checks, _results = run(root, url)
    assert checks["qgs_unit"]["status"] == "FAIL" and "UMask=0117" in checks["qgs_unit"]["message"]
    assert "socket.conf" in checks["qgs_unit"]["message"] and "zz-confidential-tee.conf" in checks["qgs_unit"]["fix"]


@pytest.mark.parametrize(
    ("transport", "kata", "status", "fragment"),
    [
        ("auto", "3.32.0", "PASS", "transport unix: Unix socket /var/run/tdx-qgs/qgs.socket serves kubevirt, kata"),
        ("auto", "3.31.2", "PASS", "serves kubevirt; vsock port 4050 serves kata"),
        ("auto", None, "PASS", "Kata version is unknown"),
        ("unix", "3.31.0", "FAIL", "asks QGS on vsock port 4050"),
        ("unix", "3.32.0", "PASS", "serves kubevirt, kata"),
    ],
)
def test_each_transport_says_which_consumer_it_serves(host, transport, kata, status, fragment):
    root, url = host
    checks, _results = run(root, url, transport=transport, kata_version=kata)
    assert checks["qgs_transport"]["status"] == status and fragment in checks["qgs_transport"]["message"]
