"""kube_target: the cluster an apply would change, read from the kubeconfig the way the client reads it."""

from __future__ import annotations

import yaml
from ansible_collections.confidential.tee.plugins.plugin_utils.kube_target import kube_target


def kubeconfig(path, current="dev", contexts=("dev", "prod")):
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": f"c-{n}", "cluster": {"server": f"https://{n}.example:6443"}} for n in contexts],
        "contexts": [{"name": n, "context": {"cluster": f"c-{n}", "user": "u"}} for n in contexts],
        "users": [{"name": "u", "user": {}}],
    }
    if current:
        config["current-context"] = current
    path.write_text(yaml.safe_dump(config))
    return str(path)


def test_current_context_of_the_named_kubeconfig(tmp_path):
    target = kube_target(kubeconfig(tmp_path / "k"), env={})
    assert target["error"] is None
    assert (target["context"], target["server"]) == ("dev", "https://dev.example:6443")
    assert "context dev (server https://dev.example:6443)" in target["describe"]


def test_named_context_wins_over_current(tmp_path):
    assert kube_target(kubeconfig(tmp_path / "k"), "prod", env={})["server"] == "https://prod.example:6443"


def test_missing_context_names_the_variable_and_the_contexts_there(tmp_path):
    error = kube_target(kubeconfig(tmp_path / "k"), "staging", env={})["error"]
    assert "context staging (tee_k8s_context) is not in the kubeconfig" in error
    assert "its contexts: dev, prod" in error and "tee_output: manifests" in error


def test_no_current_context(tmp_path):
    error = kube_target(kubeconfig(tmp_path / "k", current=None), env={})["error"]
    assert "has no current-context and tee_k8s_context is not set" in error


def test_kubeconfig_env_files_merge_first_wins(tmp_path):
    first = kubeconfig(tmp_path / "a", current="dev", contexts=("dev",))
    second = kubeconfig(tmp_path / "b", current="prod", contexts=("prod",))
    target = kube_target(env={"KUBECONFIG": f"{first}:{second}"})
    assert target["context"] == "dev" and target["kubeconfig"] == f"{first}:{second}"
    assert kube_target(None, "prod", env={"KUBECONFIG": f"{first}:{second}"})["server"] == "https://prod.example:6443"


def test_missing_file_says_which_setting_named_it(tmp_path):
    error = kube_target(str(tmp_path / "nope"), env={})["error"]
    assert error.startswith(f"no kubeconfig: tee_kubeconfig names {tmp_path / 'nope'}, which does not exist")
    assert "KUBECONFIG names" in kube_target(env={"KUBECONFIG": str(tmp_path / "nope")})["error"]


def test_not_yaml_and_not_a_mapping(tmp_path):
    (tmp_path / "bad").write_text("a: [\n")
    assert "is not YAML" in kube_target(str(tmp_path / "bad"), env={})["error"]
    (tmp_path / "list").write_text("- 1\n")
    assert "is not a kubeconfig" in kube_target(str(tmp_path / "list"), env={})["error"]


def test_in_cluster_and_token_access(tmp_path):
    env = {"KUBECONFIG": str(tmp_path / "none"), "KUBERNETES_SERVICE_HOST": "10.96.0.1"}
    assert kube_target(env=env)["server"] == "https://10.96.0.1:443"
    token = kube_target(None, None, "https://api.example:6443", env={})
    assert token["server"] == "https://api.example:6443" and "tee_k8s_host" in token["describe"]
