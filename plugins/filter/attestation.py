# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.confidential.tee.plugins.module_utils.attestation_k8s import (
    ManifestError,
    manifest_filename,
    render,
)


def attestation_manifests(request):
    """``[{"filename": "NN-kind-name.yaml", "object": {...}}]`` for the attestation chain in a cluster."""
    if not isinstance(request, dict):
        raise AnsibleFilterError("confidential.tee.attestation_manifests expects a dict of the role's settings")
    try:
        objects = render(request)
    except (ManifestError, KeyError) as exc:
        raise AnsibleFilterError(f"cannot render the attestation manifests: {exc}") from None
    return [{"filename": manifest_filename(index, obj), "object": obj} for index, obj in enumerate(objects)]


class FilterModule:
    def filters(self):
        return {"attestation_manifests": attestation_manifests}
