"""dcap_files: each component's files, owners, modes, units and redaction, from one request."""

from __future__ import annotations

import json

import pytest
from ansible_collections.confidential.tee.plugins.module_utils.attestation import jsonc
from ansible_collections.confidential.tee.plugins.module_utils.attestation.dcap_files import PLANNERS, ComponentError
from ansible_collections.confidential.tee.plugins.module_utils.attestation.pccs_config import token_hash
from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import HostReader

BASE = {
    "dcap_version": "1.26",
    "transport": "unix",
    "consumers": ["kubevirt", "kata"],
    "vsock_port": 4050,
    "number_threads": None,
    "socket_group": None,
    "qgs_dir": "/opt/intel/tdx-qgs",
    "extra_clients": [],
    "qcnl_path": "/etc/sgx_default_qcnl.conf",
    "pccs_dir": "/opt/intel/sgx-dcap-pccs",
    "settings": {},
    "secrets": {},
    "owner": None,
    "group": None,
    "validate": True,
    "on_invalid": "fail",
}
DEFAULT = (
    '{"HTTPS_PORT": 8081, "hosts": "127.0.0.1", "uri": "https://api.trustedservices.intel.com/sgx/certification/v4/",'
    ' "ApiKey": "", "UserTokenHash": "", "AdminTokenHash": "", "CachingFillMode": "LAZY", "DB_CONFIG": "sqlite",'
    ' "sqlite": {},}'
)
SECRETS = {"api_key": "a" * 32, "user_token": "user-t", "admin_token": "admin-t"}


def plan(component, root, **overrides):
    return PLANNERS[component](HostReader(str(root)), {**BASE, **overrides})


def test_qgs_files_units_and_facts(tmp_path):
    result = plan("qgs", tmp_path, transport="both")
    paths = {spec.path: spec for spec in result.files}
    assert paths["/etc/qgs.conf"].units == ["qgsd.service", "qgsd-vsock.service"]
    assert "daemon-reload" in paths["/etc/systemd/system/qgsd-vsock.service"].units
    assert result.effective == {"transport": "unix", "port": None, "threads": 0}
    assert result.info["era"] == "1.26+" and result.info["socket_group"] == "107"


def test_qgs_unix_removes_an_old_vsock_unit(tmp_path):
    vsock = next(s for s in plan("qgs", tmp_path).files if s.path.endswith("qgsd-vsock.service"))
    assert vsock.content is None


def test_qgs_needs_a_known_version(tmp_path):
    with pytest.raises(ComponentError, match="cannot tell the DCAP version"):
        plan("qgs", tmp_path, dcap_version="auto")


def test_qcnl_keeps_comments_and_refuses_garbage(tmp_path):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/sgx_default_qcnl.conf").write_text('{\n  // mine\n  "retry_times": 6\n}\n')
    result = plan("qcnl", tmp_path, settings={"pccs_url": "https://p:8081/sgx/certification/v4/"})
    assert "// mine" in result.files[0].content and result.effective["retry_times"] == 6
    (tmp_path / "etc/sgx_default_qcnl.conf").write_text("{ broken")
    with pytest.raises(ComponentError, match="on_invalid=replace"):
        plan("qcnl", tmp_path, settings={"retry_times": 1})
    replaced = plan("qcnl", tmp_path, settings={"retry_times": 1}, on_invalid="replace")
    assert replaced.effective["retry_times"] == 1


def test_pccs_production_json_private_and_redacted(tmp_path):
    (tmp_path / "opt/intel/sgx-dcap-pccs/config").mkdir(parents=True)
    (tmp_path / "opt/intel/sgx-dcap-pccs/config/default.json").write_text(DEFAULT)
    result = plan("pccs", tmp_path, settings={"hosts": "0.0.0.0"}, secrets=SECRETS)
    spec = result.files[0]
    assert (spec.path, spec.owner, spec.mode) == ("/opt/intel/sgx-dcap-pccs/config/production.json", "pccs", 0o600)
    assert jsonc.parse(spec.content).first()["UserTokenHash"] == token_hash("user-t")
    shown = spec.redact(spec.content)
    for secret in (*SECRETS.values(), token_hash("user-t"), token_hash("admin-t")):
        assert secret not in shown and secret not in json.dumps(result.effective)
    assert result.effective["ApiKey"] == "<redacted>" and result.effective["hosts"] == "0.0.0.0"


def test_pccs_refuses_a_configuration_pccs_would_not_run(tmp_path):
    (tmp_path / "opt/intel/sgx-dcap-pccs/config").mkdir(parents=True)
    (tmp_path / "opt/intel/sgx-dcap-pccs/config/default.json").write_text(DEFAULT)
    with pytest.raises(ComponentError, match="UserTokenHash is not 128 hex"):
        plan("pccs", tmp_path, secrets={"api_key": "a" * 32})
    assert plan("pccs", tmp_path, secrets={"api_key": "a" * 32}, validate=False).warnings


def test_mpa_private_and_redacted(tmp_path):
    result = plan("mpa", tmp_path, settings={"proxy_type": "direct"}, secrets={"subscription_key": "b" * 32})
    spec = result.files[0]
    assert spec.mode == 0o600 and "b" * 32 in spec.content and "b" * 32 not in spec.redact(spec.content)
    assert result.effective == {"proxy_type": "direct", "subscription_key": "<redacted>"}


def test_mpa_invalid_existing_lines_named(tmp_path):
    (tmp_path / "etc").mkdir()
    key = "0123456789abcdef0123456789ABCDEF"
    (tmp_path / "etc/mpa_registration.conf").write_text(f"log level = info\nnonsense\nsubscription_key = {key}\n")
    with pytest.raises(ComponentError, match="line 2: '<a line without a setting name, redacted>'") as refused:
        plan("mpa", tmp_path)
    # A refusal names the lines; it never quotes a value, least of all the subscription key.
    assert "line 3: " in str(refused.value) and key not in str(refused.value)


def test_unreadable_existing_file_is_an_error_not_a_silent_rewrite(tmp_path):
    (tmp_path / "etc/sgx_default_qcnl.conf").mkdir(parents=True)
    with pytest.raises(ComponentError, match="not a regular file"):
        plan("qcnl", tmp_path, settings={})


PACKAGE_QGS = "# admin note: 8 cores here\n#set port number\nport = 4050\nnumber_threads = 4\nlog_level = 2\n"


def test_qgs_conf_edited_in_place_keeps_comments_unknown_keys_and_threads(tmp_path):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/qgs.conf").write_text(PACKAGE_QGS)
    result = plan("qgs", tmp_path)
    conf = next(spec.content for spec in result.files if spec.path == "/etc/qgs.conf")
    # Only the port line goes (DCAP 1.26: any port line means vsock); QGS keeps its 4 threads.
    assert conf == PACKAGE_QGS.replace("port = 4050\n", "")
    assert result.effective == {"transport": "unix", "port": None, "threads": 4}
    vsock = plan("qgs", tmp_path, transport="vsock", consumers=["kata"], vsock_port=4051, number_threads=8)
    conf = next(spec.content for spec in vsock.files if spec.path == "/etc/qgs.conf")
    assert conf == PACKAGE_QGS.replace("port = 4050", "port = 4051").replace("= 4\n", "= 8\n")


def test_qgs_conf_line_qgs_rejects_is_named_not_kept_silently(tmp_path):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/qgs.conf").write_text("number_threads = 4 # four\n")
    with pytest.raises(ComponentError) as raised:
        plan("qgs", tmp_path)
    assert "QGS exits at start (line 1)" in str(raised.value) and "number_threads" in str(raised.value)


def test_pccs_refuses_hosts_empty_and_a_file_that_overrides_production_json(tmp_path):
    config = tmp_path / "opt/intel/sgx-dcap-pccs/config"
    config.mkdir(parents=True)
    (config / "default.json").write_text(DEFAULT)
    with pytest.raises(ComponentError, match="listen on every interface"):
        plan("pccs", tmp_path, settings={"hosts": ""}, secrets=SECRETS)
    (config / "local.json").write_text('{"hosts": "0.0.0.0"}')
    with pytest.raises(ComponentError) as raised:
        plan("pccs", tmp_path, secrets=SECRETS)
    assert "config/local.json would override the production.json" in str(raised.value)


def test_qcnl_insecure_cert_is_written_with_a_warning(tmp_path):
    result = plan(
        "qcnl", tmp_path, settings={"pccs_url": "https://p:8081/sgx/certification/v4/", "use_secure_cert": False}
    )
    assert result.effective["use_secure_cert"] is False and "use_secure_cert is false" in result.warnings[0]
    with pytest.raises(ComponentError, match="is empty"):
        plan("qcnl", tmp_path, settings={"pccs_url": ""})
