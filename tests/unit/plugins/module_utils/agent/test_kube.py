"""The agent's Kubernetes client: kubeconfig forms, in-cluster credentials, errors that name the fix."""

from __future__ import annotations

import base64

import pytest
import yaml
from ansible_collections.confidential.tee.plugins.module_utils.agent import kube


def kubeconfig(tmp_path, cluster: dict, user: dict):
    path = tmp_path / "config.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "current-context": "x",
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "clusters": [{"name": "c", "cluster": cluster}],
                "users": [{"name": "u", "user": user}],
            }
        )
    )
    return str(path)


def test_client_certificate_from_data_and_files(pki, tmp_path):
    ca = base64.b64encode(pki["ca_pem"].encode()).decode()
    inline = {
        "client-certificate-data": base64.b64encode(pki["cert"].read_bytes()).decode(),
        "client-key-data": base64.b64encode(pki["key"].read_bytes()).decode(),
    }
    loaded = kube.from_kubeconfig(
        kubeconfig(tmp_path, {"server": "https://h:6443", "certificate-authority-data": ca}, inline)
    )
    assert loaded.server == "https://h:6443" and loaded.bearer() is None
    files = {"client-certificate": str(pki["cert"]), "client-key": str(pki["key"])}
    (tmp_path / "ca.crt").write_text(pki["ca_pem"])
    loaded = kube.from_kubeconfig(
        kubeconfig(tmp_path, {"server": "https://h", "certificate-authority": "ca.crt"}, files)
    )
    assert loaded.source.startswith("kubeconfig ")


def test_token_file_is_read(pki, tmp_path):
    (tmp_path / "token").write_text("abc\n")
    (tmp_path / "ca.crt").write_text(pki["ca_pem"])
    path = kubeconfig(tmp_path, {"server": "https://h", "certificate-authority": "ca.crt"}, {"tokenFile": "token"})
    assert kube.from_kubeconfig(path).bearer() == "abc"


@pytest.mark.parametrize(
    "cluster, user, words",
    [
        ({"server": "http://h"}, {}, "is not an https:// URL"),
        (
            {"server": "https://h"},
            {"client-certificate-data": "bm90IGEgY2VydA==", "client-key-data": "eA=="},
            "unusable",
        ),
    ],
)
def test_bad_kubeconfigs(tmp_path, cluster, user, words):
    with pytest.raises(kube.KubeConfigError, match=words):
        kube.from_kubeconfig(kubeconfig(tmp_path, cluster, user))


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(kube.KubeConfigError, match="No such file"):
        kube.from_kubeconfig(str(tmp_path / "absent"))
    (tmp_path / "bad").write_text("[unclosed")
    with pytest.raises(kube.KubeConfigError, match="not valid YAML"):
        kube.from_kubeconfig(str(tmp_path / "bad"))


def test_in_cluster(pki, tmp_path, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(kube.KubeConfigError, match="pass --kubeconfig"):
        kube.in_cluster(str(tmp_path))
    (tmp_path / "token").write_text("sa-token")
    (tmp_path / "ca.crt").write_text(pki["ca_pem"])
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    found = kube.in_cluster(str(tmp_path))
    assert found.server == "https://10.96.0.1:443" and found.bearer() == "sa-token"


def test_unreachable_server_is_a_kube_error(pki, tmp_path):
    (tmp_path / "ca.crt").write_text(pki["ca_pem"])
    path = kubeconfig(tmp_path, {"server": "https://127.0.0.1:1", "certificate-authority": "ca.crt"}, {"token": "t"})
    client = kube.KubeClient(kube.from_kubeconfig(path), timeout=5)
    with pytest.raises(kube.KubeError, match="unreachable") as raised:
        client.pods_on("n1")
    assert raised.value.status == 0
