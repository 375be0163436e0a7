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
