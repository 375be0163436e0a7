# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations


class ModuleDocFragment:
    """What the TDX attestation chain must serve: shared by dcap_config and tdx_attestation_check."""

    DOCUMENTATION = r"""
options:
  dcap_version:
    description:
      - DCAP release the host runs (C(1.26)), or C(auto) to read the installed C(tdx-qgs) package version (dpkg's
        status file, then C(rpm)). QGS reads C(/etc/qgs.conf) differently before 1.24, in 1.24-1.25 and from 1.26.
    type: str
    default: auto
  transport:
    description:
      - How QGS listens. C(both) runs a second QGS on vsock (one QGS process serves one transport).
      - C(auto) chooses from the consumers and O(kata_version) (KubeVirt needs the Unix socket, Kata up to 3.31
        vsock port 4050, Kata 3.32+ the Unix socket; an unknown Kata version gets both). An explicit transport a
        consumer of a known version cannot use is refused.
    type: str
    choices: [unix, vsock, both, auto]
    default: unix
  kata_version:
    description:
      - Kata Containers release on the host (C(3.31.0)); decides whether Kata asks QGS on vsock (up to 3.31) or on
        the Unix socket (3.32+). Unknown when not given.
    type: str
  consumers:
    description:
      - Who asks QGS for quotes, as a list of strings (a string is refused, never split on commas). C(kubevirt)
        passes QEMU only a socket path and runs QEMU as uid/gid 107; C(kata) asks on vsock CID 2 port 4050 up to
        3.31 and on the Unix socket from 3.32, and runs QEMU as root.
    type: raw
    default: [kubevirt, kata]
  vsock_port:
    description: vsock port of the vsock listener (ports below 1024 need C(CAP_NET_BIND_SERVICE)).
    type: int
    default: 4050
  socket_group:
    description: Group of the QGS socket; default C(107) when C(kubevirt) is a consumer, else C(qgsd).
    type: str
  extra_clients:
    description: More identities that must connect to the socket, each a dict with C(name), C(uid), C(gid), C(groups).
    type: list
    elements: dict
    default: []
  qcnl_path:
    description: QCNL configuration file (QGS reads another one only with C(QCNL_CONF_PATH) in its environment).
    type: path
    default: /etc/sgx_default_qcnl.conf
"""
