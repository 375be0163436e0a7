"""The kernel model: misc cgroup accounting of TEE keys and the host files a node exposes.

``profiles`` says which files a kernel version has, ``misc`` is the misc cgroup controller
(``kernel/cgroup/misc.c``), ``node`` renders a whole host tree, ``backends`` puts it on a real directory
or a pyfakefs filesystem.
"""

from __future__ import annotations

from teesim.kernel.misc import ChargeError, MiscController
from teesim.kernel.profiles import PROFILES, KernelProfile, get_profile

__all__ = ["PROFILES", "ChargeError", "KernelProfile", "MiscController", "get_profile"]
