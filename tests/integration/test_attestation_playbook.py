"""playbooks/attestation.yml with the real ansible-playbook: the host form on a host tree (-vvv scanned for
secrets, idempotence, check mode) and the cluster form written as manifests and validated strictly."""

from __future__ import annotations

import hashlib
import json
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK = REPO / "playbooks" / "attestation.yml"
SECRETS = {
    "tdx_attestation_pccs_api_key": "c0ffee00c0ffee00c0ffee00c0ffee00",
    "tdx_attestation_pccs_user_token": "integration-user-Token-31",
    "tdx_attestation_pccs_admin_token": "integration-admin-Token-47",
    "tdx_attestation_mpa_subscription_key": "00112233445566778899aabbccddeeff",
}
DEFAULT_JSON = """{
    "HTTPS_PORT" : 8081,
    "hosts" : "127.0.0.1",
    "uri": "https://api.trustedservices.intel.com/sgx/certification/v4/",
    "ApiKey": "",
    "UserTokenHash" : "",
    "AdminTokenHash" : "",
    "CachingFillMode" : "LAZY",
    "DB_CONFIG" : "sqlite",
    "sqlite" : {"options" : {"storage": "pckcache.db"}},
}
"""


# The package's file with an administrator's comment and a key QGS does not know (issue 18: kept as they are).
PACKAGE_QGS = "# site: 8 cores\n#set port number\nport = 4050\nnumber_threads = 4\nfuture_key = 1\n"


INTEL_DROPIN = "[Service]\nRuntimeDirectory=tdx-qgs\nRuntimeDirectoryMode=0755\nUMask=0117\n"


def leaks(output: str) -> list[str]:
    values = list(SECRETS.values())
    values += [hashlib.sha512(value.encode()).hexdigest() for value in values]
    return [value for value in values if value in output]


@pytest.fixture
def host_tree(tmp_path):
    root = tmp_path / "host"
    (root / "etc").mkdir(parents=True)
    (root / "etc/passwd").write_text("root:x:0:0::/root:/bin/sh\npccs:x:991:991::/opt:/sbin/nologin\n")
    (root / "etc/group").write_text("root:x:0:\npccs:x:991:\n")
    (root / "etc/sgx_default_qcnl.conf").write_text('{\n  // the package comment\n  "retry_times": 6\n}\n')
    (root / "etc/qgs.conf").write_text(PACKAGE_QGS)
    # The package's unit and the drop-in Intel's installer writes from DCAP 1.26 (UMask=0117): ours must win.
    (root / "lib/systemd/system").mkdir(parents=True)
    (root / "lib/systemd/system/qgsd.service").write_text("[Service]\nUser=qgsd\nExecStart=/opt/intel/tdx-qgs/qgs\n")
    (root / "etc/systemd/system/qgsd.service.d").mkdir(parents=True)
    (root / "etc/systemd/system/qgsd.service.d/socket.conf").write_text(INTEL_DROPIN)
    (root / "var/lib/dpkg").mkdir(parents=True)
    (root / "var/lib/dpkg/status").write_text(
        "Package: tdx-qgs\nStatus: install ok installed\nVersion: 1.24.100.3-noble1\n"
    )
    (root / "opt/intel/sgx-dcap-pccs/config").mkdir(parents=True)
    (root / "opt/intel/sgx-dcap-pccs/config/default.json").write_text(DEFAULT_JSON)
    return root


def play(ansible_playbook_cli, tmp_path, extra: dict, *args: str):
    variables = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "tee_attestation_hosts": "localhost",
        **SECRETS,
        **extra,
    }
    (tmp_path / "vars.yml").write_text(yaml.safe_dump(variables))
    return ansible_playbook_cli(PLAYBOOK, "-i", "localhost,", "-e", f"@{tmp_path / 'vars.yml'}", *args, timeout=600)


def host_vars(root: Path) -> dict:
    return {
        "tee_host_root": str(root),
        "tdx_attestation_pccs_enabled": True,
        "tdx_attestation_registration": "mpa",
        "tdx_attestation_check_fail": False,
    }


@pytest.mark.slow
def test_host_form_converges_idempotent_checkable_and_silent_about_secrets(ansible_playbook_cli, tmp_path, host_tree):
    first = play(ansible_playbook_cli, tmp_path, host_vars(host_tree), "-vvv", "--diff")
    assert first.returncode == 0, first.stdout[-4000:]
    assert leaks(first.stdout + first.stderr) == [], "a secret or its hash is in the -vvv output"
    assert "<redacted>" in first.stdout  # the diff of production.json and the MPA file, secrets masked

    conf = (host_tree / "etc/qgs.conf").read_text()
    # DCAP 1.24 (the tree's dpkg status): the Unix socket needs no port line at all; everything else stays.
    assert conf == PACKAGE_QGS.replace("port = 4050\n", "")
    assert "-port = 4050" in first.stdout and "-number_threads" not in first.stdout  # the diff: only that line
    qcnl = (host_tree / "etc/sgx_default_qcnl.conf").read_text()
    assert "// the package comment" in qcnl and '"pccs_url": "https://localhost:8081/sgx/certification/v4/"' in qcnl
    production = host_tree / "opt/intel/sgx-dcap-pccs/config/production.json"
    assert stat.S_IMODE(production.stat().st_mode) == 0o600 and production.stat().st_uid == 991
    key = (host_tree / "opt/intel/sgx-dcap-pccs/ssl_key/private.pem").stat()
    # A mounted host_root: the key belongs to the host's pccs (uid 991 in the tree), which can reach it.
    assert stat.S_IMODE(key.st_mode) == 0o600 and key.st_uid == 991
    assert stat.S_IMODE((host_tree / "opt/intel/sgx-dcap-pccs/ssl_key").stat().st_mode) & 0o001
    assert stat.S_IMODE((host_tree / "etc/mpa_registration.conf").stat().st_mode) == 0o600
    assert "PASS qgs_config" in first.stdout and "FAIL qgs_socket" in first.stdout  # no QGS runs in a tree
    # qgsd.service as systemd merges the unit, Intel's socket.conf and ours: ours (zz-*) decides the umask.
    assert "PASS qgs_unit" in first.stdout and "UMask 0077" in first.stdout
    # transport auto with no Kata version: both listeners, each saying whom it serves (issue 18).
    # (the report is printed folded: look for pieces no fold can split)
    assert "PASS qgs_transport: transport both" in first.stdout and "Kata version is unknown" in first.stdout
    assert (host_tree / "etc/systemd/system/qgsd-vsock.service").is_file()
    assert (host_tree / "etc/modules-load.d").is_dir()  # vsock_loopback for Kata's vsock

    second = play(ansible_playbook_cli, tmp_path, host_vars(host_tree))
    assert second.returncode == 0 and "changed=0" in second.stdout, second.stdout[-3000:]

    snapshot = {p: p.read_bytes() for p in host_tree.rglob("*") if p.is_file()}
    changed = {**host_vars(host_tree), "tdx_attestation_pccs_user_token": "another-user-Token-99",
               "tdx_attestation_pccs_url": "https://pccs.example.com:8081/sgx/certification/v4/"}  # fmt: skip
    checked = play(ansible_playbook_cli, tmp_path, changed, "--check", "--diff", "-vvv")
    assert checked.returncode == 0, checked.stdout[-3000:]
    assert {p: p.read_bytes() for p in host_tree.rglob("*") if p.is_file()} == snapshot
    assert "pccs.example.com" in checked.stdout and "another-user-Token-99" not in checked.stdout
    assert hashlib.sha512(b"another-user-Token-99").hexdigest() not in checked.stdout


@pytest.mark.slow
def test_cluster_form_writes_one_valid_file_per_object(ansible_playbook_cli, tmp_path):
    manifests = tmp_path / "manifests"
    extra = {
        "tee_output": "manifests",
        "tee_manifest_dir": str(manifests),
        "tdx_attestation_dcap_version": "1.26",
        "tdx_attestation_qgs_transport": "both",
        "tdx_attestation_pccs_enabled": True,
        "tdx_attestation_registration": "pck_retrieval",
    }
    first = play(ansible_playbook_cli, tmp_path, extra, "-vvv", "--diff")
    assert first.returncode == 0, first.stdout[-4000:]
    assert leaks(first.stdout + first.stderr) == []
    assert "(secret file: content not shown, sha256" in first.stdout
    files = sorted(path.name for path in manifests.iterdir())
    assert files[0] == "00-namespace-tdx-attestation.yaml" and files[-1] == "85-daemonset-tdx-attestation-qgs.yaml"
    assert len(files) == 9
    secrets = [name for name in files if name.startswith("05-secret-")]
    assert [stat.S_IMODE((manifests / name).stat().st_mode) for name in secrets] == [0o600] * 3
    assert all(
        (manifests / name).read_text().startswith("# confidential.tee owner: tdx_attestation\n") for name in files
    )
    validate = Path(sys.executable).parent / "kubernetes-validate"
    completed = subprocess.run(
        [str(validate), "--strict", *sorted(str(p) for p in manifests.iterdir())], capture_output=True, text=True
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    tls = yaml.safe_load((manifests / "05-secret-tdx-attestation-pccs-tls.yaml").read_text())
    assert tls["type"] == "kubernetes.io/tls" and set(tls["data"]) == {"tls.crt", "tls.key"}

    second = play(ansible_playbook_cli, tmp_path, {**extra, "tdx_attestation_registration": "none"})
    assert second.returncode == 0, second.stdout[-3000:]
    left = sorted(path.name for path in manifests.iterdir())
    # The registration Secret and DaemonSet are no longer rendered: cluster_objects pruned them.
    assert "05-secret-tdx-attestation-pck-retrieval-setting.yaml" not in left and len(left) == 7


@pytest.mark.slow
def test_host_form_refuses_what_pccs_would_ignore_or_misread(ansible_playbook_cli, tmp_path, host_tree):
    # One run, the first refusal stops it: a config/local.json that overrides the production.json written.
    (host_tree / "opt/intel/sgx-dcap-pccs/config/local.json").write_text('{"hosts": "0.0.0.0"}\n')
    refused = play(ansible_playbook_cli, tmp_path, {**host_vars(host_tree), "tdx_attestation_pccs_listen": ""})
    assert refused.returncode != 0
    assert "listen on every interface" in refused.stdout and "tdx_attestation_pccs_listen" in refused.stdout
    assert not (host_tree / "opt/intel/sgx-dcap-pccs/config/production.json").exists()
    assert leaks(refused.stdout + refused.stderr) == []
    refused = play(ansible_playbook_cli, tmp_path, host_vars(host_tree))
    assert refused.returncode != 0 and "config/local.json would override the production.json" in refused.stdout
    assert not (host_tree / "opt/intel/sgx-dcap-pccs/config/production.json").exists()

    # A site drop-in sorting after ours that puts 1.26's UMask back: the merge is refused before any write.
    (host_tree / "opt/intel/sgx-dcap-pccs/config/local.json").unlink()
    site = host_tree / "etc/systemd/system/qgsd.service.d/zzz-site.conf"
    site.write_text("[Service]\nUMask=0117\n")
    refused = play(ansible_playbook_cli, tmp_path, host_vars(host_tree))
    assert refused.returncode != 0 and "zzz-site.conf" in refused.stdout and "UMask=0117" in refused.stdout
    site.unlink()

    # Kata 3.32 asks on the Unix socket: auto serves it alone; the vsock unit of the runs above is removed.
    kata_332 = play(ansible_playbook_cli, tmp_path, {**host_vars(host_tree), "tdx_attestation_kata_version": "3.32.0"})
    assert kata_332.returncode == 0, kata_332.stdout[-3000:]
    assert "PASS qgs_transport: transport unix" in kata_332.stdout
    assert not (host_tree / "etc/systemd/system/qgsd-vsock.service").exists()
    # An explicit transport Kata 3.31 cannot use is refused before anything is written.
    mismatch = {
        **host_vars(host_tree),
        "tdx_attestation_kata_version": "3.31.0",
        "tdx_attestation_qgs_transport": "unix",
    }
    refused = play(ansible_playbook_cli, tmp_path, mismatch)
    assert refused.returncode != 0 and "asks QGS on vsock port 4050" in refused.stdout


def failure_message(completed) -> str:
    """The message of the one task that failed, from the JSON callback's output."""
    data = json.loads(completed.stdout)
    failed = [
        result["msg"]
        for play_ in data["plays"]
        for task in play_["tasks"]
        for result in task["hosts"].values()
        if result.get("failed") and not result.get("ignore_errors")
    ]
    assert len(failed) == 1, failed
    return failed[0]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("variables", "expected"),
    [
        (
            {"tdx_attestation_qcnl_settings": {"retry_times": 1.5}},
            "confidential.tee.dcap_config on host localhost: inventory variable tdx_attestation_qcnl_settings "
            "(option settings.retry_times): QCNL setting retry_times must be a JSON int",
        ),
        (
            {"tdx_attestation_pccs_settings": {"Bogus": 1}},
            "confidential.tee.dcap_config on host localhost: inventory variable tdx_attestation_pccs_settings "
            "(option settings.Bogus): unknown PCCS setting 'Bogus'",
        ),
        (
            {"tdx_attestation_qgs_socket_group": "kvm;id"},
            "confidential.tee.dcap_config on host localhost: inventory variable tdx_attestation_qgs_socket_group "
            "(option socket_group): socket_group 'kvm;id' is not a group name",
        ),
    ],
    ids=["qcnl-setting", "pccs-setting", "socket-group"],
)
def test_a_module_refusal_in_the_role_names_the_inventory_variable_and_the_host(
    ansible_playbook_cli, tmp_path, host_tree, variables, expected
):
    (tmp_path / "vars.yml").write_text(
        yaml.safe_dump(
            {"ansible_connection": "local", "ansible_python_interpreter": sys.executable, **SECRETS}
            | {"tee_attestation_hosts": "localhost", **host_vars(host_tree), **variables}
        )
    )
    completed = ansible_playbook_cli(
        PLAYBOOK,
        "-i",
        "localhost,",
        "-e",
        f"@{tmp_path / 'vars.yml'}",
        env={"ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json"},
        timeout=600,
    )
    assert completed.returncode != 0
    message = failure_message(completed)
    assert message.startswith(expected), message
    assert "refused_option" not in completed.stdout  # the action plugin turned it into the names above
    assert leaks(completed.stdout + completed.stderr) == []


@pytest.mark.slow
def test_a_module_refusal_outside_a_role_names_the_option(playbook, tmp_path):
    task = {
        "name": "Point QCNL at the site PCCS",
        "confidential.tee.dcap_config": {
            "host_root": str(tmp_path),
            "component": "qcnl",
            "settings": {"pccs_url": "https://pccs.example.com:8081/sgx/certification/v4/", "retry_times": 1.5},
        },
    }
    run = playbook(tmp_path, [task], {"tdx-node-3": {}})
    message = run.result("Point QCNL at the site PCCS", "tdx-node-3")["msg"]
    assert message.startswith(
        "confidential.tee.dcap_config on host tdx-node-3: option settings.retry_times: QCNL setting retry_times must "
        "be a JSON int"
    ), message
    assert not (tmp_path / "etc").exists()
