"""manifests: stable file names in apply order."""

from __future__ import annotations

import pytest
from ansible_collections.confidential.tee.plugins.module_utils.common import manifests


def test_manifest_files_are_stable_and_ordered():
    objects = [
        {"apiVersion": "kataconfiguration.openshift.io/v1", "kind": "KataConfig", "metadata": {"name": "k"}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "osc-feature-gates", "namespace": "ns"}},
        {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "kata-qemu-tdx"}},
    ]
    files = [f["file"] for f in manifests.manifest_files(objects)]
    assert files == [
        "10-configmap-ns-osc-feature-gates.yaml",
        "30-runtimeclass-kata-qemu-tdx.yaml",
        "60-kataconfig-k.yaml",
    ]
    assert files == [f["file"] for f in manifests.manifest_files(list(reversed(objects)))]
    with pytest.raises(manifests.ManifestError, match="two objects"):
        manifests.manifest_files(objects + objects[:1])
    with pytest.raises(manifests.ManifestError, match="lacks"):
        manifests.manifest_files([{"kind": "X"}])


# Kubernetes names (DNS-1123 subdomains) may have 253 characters; a file name has at most 255 bytes (NAME_MAX).
LONG = ".".join(["a" * 63, "b" * 63, "c" * 63, "d" * 61])


def _node(name):
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}


def test_a_253_character_node_name_gives_a_file_name_that_fits_and_is_stable():
    assert len(LONG) == 253
    (entry,) = manifests.manifest_files([_node(LONG)])
    name = entry["file"]
    assert len(name.encode()) <= 255 and name.startswith("50-node-aaaa") and name.endswith(".yaml")
    assert manifests.manifest_files([_node(LONG)])[0]["file"] == name  # the same on every run


def test_long_names_sharing_a_prefix_stay_distinct_and_never_equal_a_plain_name():
    names = [LONG, LONG[:-1] + "e", LONG[:-10] + "x" * 10]
    files = [f["file"] for f in manifests.manifest_files([_node(n) for n in names])]
    assert len(set(files)) == 3 and all(len(f.encode()) <= 255 for f in files)
    assert all("_" in f for f in files)  # plain names (Kubernetes names) never hold '_'
    namespaced = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "c" * 253, "namespace": "n" * 63},
    }
    assert len(manifests.file_name(namespaced).encode()) <= 255


def test_a_file_name_over_name_max_is_refused_by_the_writer_with_its_length():
    head = manifests.marker("me")
    with pytest.raises(manifests.ManifestError, match="has 260 bytes; a file name has at most 255"):
        manifests.plan_directory({}, [{"file": "x" * 255 + ".yaml", "content": head}], "me")
