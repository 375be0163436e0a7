# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""The one TEE vocabulary of the collection and of ``teesim``: names that several wings must spell alike.

Standard library only.
"""

from __future__ import annotations

# Intel DCAP's QGS listens here when it serves the Unix socket (server_main.cpp, every release that has one);
# QEMU (KubeVirt's virt-launcher, Kata 3.32+) connects to this path.
QGS_SOCKET = "/var/run/tdx-qgs/qgs.socket"
