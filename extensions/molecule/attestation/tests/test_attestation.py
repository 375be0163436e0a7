"""After converge + idempotence: files, owners and modes; services and the socket as uid 107 sees it; a broken
and a fixed chain through the real check module; --check changes nothing and -vvv shows no secret."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

SCENARIO = Path(__file__).resolve().parents[1]
INSTANCE = "tee-attest-host"
GROUP_VARS = yaml.safe_load((SCENARIO / "molecule.yml").read_text())["provisioner"]["inventory"]["group_vars"]["all"]
SECRETS = {
    name: value for name, value in GROUP_VARS.items() if name.endswith(("_api_key", "_token", "_subscription_key"))
}
PCCS = "/opt/intel/sgx-dcap-pccs"
SOCKET = "/var/run/tdx-qgs/qgs.socket"
QCNL = "/etc/sgx_default_qcnl.conf"
ANCHOR = "/usr/local/share/ca-certificates/confidential-tee-pccs.crt"
# The check's reports outlive the scenario (Molecule's destroy removes its own directory): README material.
REPORTS = SCENARIO.parents[2] / ".build" / "molecule-reports" / "attestation"


def run_play(tmp_path: Path, tasks: list[dict], *args: str, callback: str = "ansible.posix.json"):
    """A real ansible-playbook run against the instance over the podman connection."""
    inventory = {"all": {"hosts": {INSTANCE: {"ansible_connection": "containers.podman.podman", **GROUP_VARS}}}}
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    play = [{"name": "verify", "hosts": "all", "gather_facts": False, "tasks": tasks}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    return subprocess.run(
        ["ansible-playbook", "-i", str(tmp_path / "inventory.yml"), str(tmp_path / "play.yml"), *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_STDOUT_CALLBACK": callback},
    )


def check_chain(tmp_path: Path, name: str, qcnl: dict | None = None) -> dict:
    """Run confidential.tee.tdx_attestation_check as the role would (after writing ``qcnl`` settings with
    confidential.tee.dcap_config, in the same play), keep its report, return its checks by link."""
    before = [{"name": "qcnl", "confidential.tee.dcap_config": {"component": "qcnl", "settings": qcnl}}] if qcnl else []
    task = {
        "name": "check",
        "confidential.tee.tdx_attestation_check": {
            "transport": "unix",
            "consumers": ["kubevirt", "kata"],
            "expect_pccs_url": "https://localhost:8081/sgx/certification/v4/",
            "pccs_local": True,
            "user_token": SECRETS["tdx_attestation_pccs_user_token"],
            "admin_token": SECRETS["tdx_attestation_pccs_admin_token"],
            "fail_on_fail": False,
        },
    }
    completed = run_play(tmp_path, [*before, task])
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    for value in SECRETS.values():
        assert value not in completed.stdout
    result = json.loads(completed.stdout)["plays"][0]["tasks"][-1]["hosts"][INSTANCE]
    REPORTS.mkdir(parents=True, exist_ok=True)
    (REPORTS / f"{name}.txt").write_text("\n".join(result["report"]) + "\n")
    return {item["name"]: item for item in result["checks"]}


def plain(host, path: str, user: str, group: str, mode: int) -> str:
    f = host.file(path)
    assert f.is_file, path
    assert (f.user, f.group, f.mode) == (user, group, mode), path
    return f.content_string


def test_qgs_files_mean_unix_socket_for_the_consumers(host):
    conf = plain(host, "/etc/qgs.conf", "root", "root", 0o644)
    # DCAP 1.24+ reads any port line as vsock: the Unix socket needs none at all.
    assert not [line for line in conf.splitlines() if line.replace(" ", "").startswith("port")]
    # Edited in place (issue 18): the package's comments and number_threads = 4 stay, so QGS keeps 4 threads.
    assert conf.splitlines()[:3] == [
        "# QGS configuration (stand-in package): with no port line QGS 1.26 listens on the Unix socket.",
        "#port = 4050",
        "number_threads = 4",
    ]
    dropin = plain(host, "/etc/systemd/system/qgsd.service.d/zz-confidential-tee.conf", "root", "root", 0o644)
    assert "UMask=0077" in dropin.splitlines()
    assert f"ExecStartPost=+/usr/local/libexec/confidential-tee/qgs-socket-access {SOCKET} 107 0660 30" in dropin
    assert not host.file("/etc/systemd/system/qgsd-vsock.service").exists


def test_qcnl_edited_in_place_with_its_comments(host):
    text = plain(host, QCNL, "root", "root", 0o644)
    assert "// Where QGS fetches PCK certificates" in text and ',"retry_delay": 10' in text
    assert '"pccs_url": "https://localhost:8081/sgx/certification/v4/"' in text
    assert '"use_secure_cert": true' in text


def test_pccs_production_json_holds_hashes_never_tokens(host):
    production = plain(host, f"{PCCS}/config/production.json", "pccs", "pccs", 0o600)
    config = json.loads("\n".join(line for line in production.splitlines() if not line.strip().startswith("//")))
    for kind in ("user", "admin"):
        token = SECRETS[f"tdx_attestation_pccs_{kind}_token"]
        assert config[f"{kind.capitalize()}TokenHash"] == hashlib.sha512(token.encode()).hexdigest()
        assert token not in production
    assert config["ApiKey"] == SECRETS["tdx_attestation_pccs_api_key"]
    # default.json is the package's conffile: dpkg still sees it unmodified.
    assert "/opt/intel/sgx-dcap-pccs/config/default.json" not in host.check_output(
        "dpkg --verify sgx-dcap-pccs || true"
    )
    plain(host, f"{PCCS}/ssl_key/private.pem", "pccs", "pccs", 0o600)
    plain(host, f"{PCCS}/ssl_key/ca.key", "root", "root", 0o600)
    plain(host, f"{PCCS}/ssl_key/file.crt", "root", "root", 0o644)
    plain(host, ANCHOR, "root", "root", 0o644)


def test_mpa_settings_private(host):
    text = plain(host, "/etc/mpa_registration.conf", "root", "root", 0o600)
    assert f"subscription key = {SECRETS['tdx_attestation_mpa_subscription_key']}" in text.splitlines()


def test_services_run_with_the_dropin_and_the_socket_is_for_gid_107(host):
    assert host.service("qgsd").is_running and host.service("pccs").is_running
    # zz-confidential-tee.conf sorts after the package's socket.conf (UMask=0117) and wins.
    assert host.check_output("systemctl show -p UMask qgsd") == "UMask=0077"
    # Intel's 1.26 socket.conf and ours, merged by systemd itself, agree with the collection's own merge (qgs_unit).
    assert host.check_output("systemctl show -p RuntimeDirectoryMode qgsd") == "RuntimeDirectoryMode=0755"
    assert host.file("/etc/systemd/system/qgsd.service.d/socket.conf").contains("UMask=0117")
    assert host.run("systemd-analyze verify qgsd.service").rc == 0
    socket = host.file(SOCKET)
    assert socket.is_socket and socket.mode == 0o660 and socket.gid == 107
    assert host.file("/run/tdx-qgs").mode == 0o755


@pytest.mark.parametrize(("uid", "allowed"), [(107, True), (108, False)])
def test_socket_as_the_kernel_sees_it(host, uid, allowed):
    connect = f"python3 -c \"import socket; socket.socket(socket.AF_UNIX).connect('{SOCKET}')\""
    result = host.run(f"setpriv --reuid={uid} --regid={uid} --clear-groups {connect}")
    assert (result.rc == 0) is allowed, result.stderr
    if not allowed:
        assert "Permission denied" in result.stderr


def test_broken_chain_then_fixed(host, tmp_path):
    host.run_expect([0], "cp -p /etc/qgs.conf /var/tmp/qgs.conf.saved")
    # Three classic breaks: 'port = 0' (vsock port 0 from DCAP 1.24), the socket back to group qgsd (uid 107
    # locked out), and the PCCS CA no longer trusted while use_secure_cert is true (curl error 60).
    host.run_expect([0], "sed -i '$ a port = 0' /etc/qgs.conf")
    host.run_expect([0], f"chgrp qgsd {SOCKET}")
    host.run_expect([0], f"mv {ANCHOR} /var/tmp/pccs-ca.crt && update-ca-certificates --fresh >/dev/null")
    broken = check_chain(tmp_path, "broken")
    assert broken["qgs_config"]["status"] == "FAIL" and "vsock port 0" in broken["qgs_config"]["message"]
    assert broken["socket_access:kubevirt"]["status"] == "FAIL"
    assert "no write permission on the socket" in broken["socket_access:kubevirt"]["message"]
    assert broken["socket_access:kata"]["status"] == "PASS"
    assert broken["pccs_tls"]["status"] == "FAIL" and "curl error 60" in broken["pccs_tls"]["message"]
    assert broken["pccs_reachable"]["status"] == "FAIL" and "see pccs_tls" in broken["pccs_reachable"]["fix"]

    # The quick fix QCNL offers: stop verifying. The chain works; the check says it is not for production.
    host.run_expect([0], f"mv /var/tmp/qgs.conf.saved /etc/qgs.conf && chgrp 107 {SOCKET}")
    insecure = check_chain(tmp_path, "fixed-insecure", qcnl={"use_secure_cert": False})
    assert insecure["pccs_tls"]["status"] == "PASS" and "not for production" in insecure["pccs_tls"]["message"]
    assert all(item["status"] != "FAIL" for item in insecure.values()), insecure

    # The real fix: trust the PCCS CA and verify again.
    host.run_expect([0], f"mv /var/tmp/pccs-ca.crt {ANCHOR} && update-ca-certificates >/dev/null")
    fixed = check_chain(tmp_path, "fixed", qcnl={"use_secure_cert": True})
    assert all(item["status"] != "FAIL" for item in fixed.values()), fixed
    assert fixed["pccs_tls"]["status"] == "PASS" and "trusted by" in fixed["pccs_tls"]["message"]
    # Intel's 1.26 socket.conf (UMask=0117) and ours, merged in systemd's order: ours decides.
    assert fixed["qgs_unit"]["status"] == "PASS" and "UMask 0077" in fixed["qgs_unit"]["message"]


def test_check_mode_changes_nothing_and_verbose_output_shows_no_secret(host, tmp_path):
    """Every config writer in --check --diff -vvv against the converged host: changes planned, none made, no
    secret (or token hash) printed. The whole playbook in check mode runs in tests/integration (local, faster)."""
    files = ["/etc/qgs.conf", QCNL, f"{PCCS}/config/production.json", "/etc/mpa_registration.conf"]
    snapshot = "sha256sum {0} && stat -c '%n %a %U %G' {0}".format(" ".join(files))
    before = host.check_output(snapshot)
    new_token, new_key = "check-mode-Token-5521", "0f1e2d3c4b5a69788796a5b4c3d2e1f0"
    tasks = [
        {"name": "qgs", "confidential.tee.dcap_config": {"component": "qgs", "socket_group": "qgsd"}},
        {
            "name": "qcnl",
            "confidential.tee.dcap_config": {
                "component": "qcnl",
                "settings": {"pccs_url": "https://pccs.example.com:8081/sgx/certification/v4/"},
            },
        },
        {
            "name": "pccs",
            "confidential.tee.dcap_config": {
                "component": "pccs",
                "settings": {"hosts": "0.0.0.0"},
                "secrets": {
                    "api_key": SECRETS["tdx_attestation_pccs_api_key"],
                    "user_token": new_token,
                    "admin_token": SECRETS["tdx_attestation_pccs_admin_token"],
                },
            },
        },
        {
            "name": "mpa",
            "confidential.tee.dcap_config": {"component": "mpa", "secrets": {"subscription_key": new_key}},
        },
    ]
    completed = run_play(tmp_path, tasks, "--check", "--diff", "-vvv", callback="ansible.builtin.default")
    output = completed.stdout + completed.stderr
    assert completed.returncode == 0, output[-4000:]
    assert "changed=4" in output and '+    "hosts": "0.0.0.0"' in output  # four planned changes, with diffs
    assert "pccs.example.com" in output and "subscription key = <redacted>" in output
    assert host.check_output(snapshot) == before
    values = [*SECRETS.values(), new_token, new_key]
    leaked = [v for v in values + [hashlib.sha512(v.encode()).hexdigest() for v in values] if v in output]
    assert leaked == [], f"secrets in -vvv output: {len(leaked)}"
