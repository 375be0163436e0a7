# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations


class ModuleDocFragment:
    """The shared ``host_root`` option of every confidential.tee module that reads host files."""

    DOCUMENTATION = r"""
options:
  host_root:
    description:
      - Directory under which the host's C(/sys), C(/proc), C(/dev), C(/etc) and C(/var) are read.
      - Use C(/host) in a DaemonSet that mounts the node's root there, or the root of a simulated node
        tree built by C(teesim node build).
    type: path
    default: /
"""
