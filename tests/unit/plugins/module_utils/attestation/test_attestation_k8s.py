"""attestation_k8s: the chain as Kubernetes objects, validated against the real core schemas (--strict)."""

from __future__ import annotations

import base64
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible_collections.confidential.tee.plugins.module_utils.attestation import jsonc
from ansible_collections.confidential.tee.plugins.module_utils.attestation.attestation_k8s import ManifestError, render
from ansible_collections.confidential.tee.plugins.module_utils.attestation.dcap_version import (
    DcapVersion,
    qgs_behaviour,
)
from ansible_collections.confidential.tee.plugins.module_utils.attestation.pccs_config import token_hash
from ansible_collections.confidential.tee.plugins.module_utils.attestation.qgs_config import effective_qgs
from ansible_collections.confidential.tee.plugins.module_utils.common.manifests import file_name

VALIDATE = Path(sys.executable).parent / "kubernetes-validate"
REQUEST = {
    "namespace": "tdx-attestation",
    "dcap_version": "1.26",
    "transport": "both",
    "consumers": ["kubevirt", "kata"],
    "vsock_port": 4050,
    "number_threads": 4,
    "socket_group": "",
    "qcnl_settings": {"use_secure_cert": True},
    "pccs_enabled": True,
    "pccs_port": 8081,
    "pccs_settings": {"CachingFillMode": "LAZY"},
    "pccs_secrets": {"api_key": "a" * 32, "user_token": "user-t", "admin_token": "admin-t", "db_password": None},
    "pccs_tls_cert": "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
    "pccs_tls_key": "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n",
    "registration": "pck_retrieval",
    "qgs_image": "registry.example/intel-tdx-qgs:1.26",
    "pccs_image": "registry.example/pccs:1.26",
    "registration_image": "registry.example/pck-id-retrieval:1.26",
    "qgs_binary": "/opt/intel/tdx-qgs/qgs",
    "pck_retrieval_binary": "/opt/intel/sgx-pck-id-retrieval-tool/PCKIDRetrievalTool",
    "image_pull_policy": "IfNotPresent",
    "node_selector": {"intel.feature.node.kubernetes.io/tdx": "true"},
}


def by_name(objects):
    return {f"{o['kind']}/{o['metadata']['name']}": o for o in objects}


def data(secret, key):
    return base64.b64decode(secret["data"][key]).decode()


def test_order_and_stable_file_names():
    objects = render(REQUEST)
    assert [file_name(o) for o in objects] == [
        "00-namespace-tdx-attestation.yaml",
        "05-secret-tdx-attestation-pccs-config.yaml",
        "05-secret-tdx-attestation-pccs-tls.yaml",
        "05-secret-tdx-attestation-pck-retrieval-setting.yaml",
        "10-configmap-tdx-attestation-qgs-config.yaml",
        "70-service-tdx-attestation-pccs.yaml",
        "80-deployment-tdx-attestation-pccs.yaml",
        "85-daemonset-tdx-attestation-pck-registration.yaml",
        "85-daemonset-tdx-attestation-qgs.yaml",
    ]
    assert render(REQUEST) == objects


def test_qgs_daemonset_on_tdx_nodes_with_sgx_devices_and_the_hosts_socket_dir():
    objects = by_name(render(REQUEST))
    pod = objects["DaemonSet/qgs"]["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert pod["nodeSelector"] == {"intel.feature.node.kubernetes.io/tdx": "true"}
    assert {"name": "socket-dir", "hostPath": {"path": "/var/run/tdx-qgs", "type": "DirectoryOrCreate"}} in pod[
        "volumes"
    ]
    unix, vsock = pod["containers"]
    assert unix["resources"]["limits"] == {"sgx.intel.com/enclave": "1", "sgx.intel.com/provision": "1"}
    assert unix["securityContext"]["runAsGroup"] == 107  # KubeVirt's QEMU reaches the socket through its gid
    assert unix["command"][-1] == "umask 0007 && exec /opt/intel/tdx-qgs/qgs --no-daemon -n=4"
    assert vsock["command"][-1].endswith("--no-daemon -p=4050 -n=4")


def test_config_maps_mean_what_the_host_form_means():
    config = by_name(render(REQUEST))["ConfigMap/qgs-config"]["data"]
    assert effective_qgs(config["qgs.conf"], qgs_behaviour(DcapVersion(1, 26))).transport == "unix"
    qcnl = jsonc.parse(config["sgx_default_qcnl.conf"]).first()
    assert qcnl == {"pccs_url": "https://pccs.tdx-attestation.svc:8081/sgx/certification/v4/", "use_secure_cert": True}


def test_pccs_secret_holds_hashes_and_listens_for_the_cluster():
    objects = by_name(render(REQUEST))
    production = jsonc.parse(data(objects["Secret/pccs-config"], "production.json")).first()
    assert production["UserTokenHash"] == token_hash("user-t") and production["hosts"] == "0.0.0.0"
    assert "user-t" not in data(objects["Secret/pccs-config"], "production.json")
    mounts = objects["Deployment/pccs"]["spec"]["template"]["spec"]["volumes"][1]["secret"]["items"]
    assert mounts == [{"key": "tls.key", "path": "private.pem"}, {"key": "tls.crt", "path": "file.crt"}]
    setting = data(objects["Secret/pck-retrieval-setting"], "network_setting.conf")
    assert "PCCS_URL=https://pccs.tdx-attestation.svc:8081/sgx/certification/v4/platforms" in setting
    assert "user_token=user-t" in setting  # the tool reads it from its working directory, never argv


@pytest.mark.parametrize(
    ("override", "fragment"),
    [
        ({"dcap_version": "auto"}, "set tdx_attestation_dcap_version"),
        ({"transport": "vsock"}, "KubeVirt passes only a Unix socket path"),
        ({"socket_group": "qgsd"}, "numeric gid"),
        ({"pccs_tls_key": ""}, "TLS certificate and key"),
        ({"pccs_secrets": {"api_key": "a" * 32}}, "registration pck_retrieval needs the PCCS user token"),
    ],
)
def test_impossible_requests(override, fragment):
    request = {**REQUEST, **override}
    if "pccs_secrets" in override:
        request["pccs_enabled"] = False
    with pytest.raises(ManifestError) as raised:
        render(request)
    assert fragment in str(raised.value)


@pytest.mark.slow
@pytest.mark.parametrize("transport", ["unix", "both"])
def test_every_object_passes_the_real_schemas_strictly(tmp_path, transport):
    if not VALIDATE.exists():
        pytest.skip("kubernetes-validate is not installed (make venv installs the dev extra)")
    objects = render({**REQUEST, "transport": transport})
    for obj in objects:
        (tmp_path / file_name(obj)).write_text(yaml.safe_dump(obj, sort_keys=False))
    files = sorted(str(path) for path in tmp_path.iterdir())
    completed = subprocess.run([str(VALIDATE), "--strict", *files], capture_output=True, text=True, check=False)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert completed.stdout.count("passed") == len(objects)
