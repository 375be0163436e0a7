# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""The argument spec both attestation modules share (documented once in doc_fragments/attestation.py)."""

from __future__ import annotations


def chain_arguments() -> dict:
    """Options describing what the chain must serve: release, transport, consumers, socket, QCNL file."""
    return dict(
        host_root=dict(type="path", default="/"),
        dcap_version=dict(type="str", default="auto"),
        transport=dict(type="str", default="unix", choices=["unix", "vsock", "both", "auto"]),
        kata_version=dict(type="str"),
        # raw, checked strictly: a string would be split on commas.
        consumers=dict(type="raw", default=["kubevirt", "kata"]),
        vsock_port=dict(type="int", default=4050),
        socket_group=dict(type="str"),
        extra_clients=dict(type="list", elements="dict", default=[]),
        qcnl_path=dict(type="path", default="/etc/sgx_default_qcnl.conf"),
    )
