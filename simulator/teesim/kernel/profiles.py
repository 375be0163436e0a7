"""Kernel profiles: which misc cgroup files a given kernel generation exposes.

Models three generations seen on real hosts:

* ``current``: 6.16 and later (``tdx`` resource merged with the TDX host support). Root has
  ``misc.capacity``, ``misc.current`` and ``misc.peak``; children have ``misc.max``, ``misc.current``,
  ``misc.peak``, ``misc.events`` and ``misc.events.local``.
* ``old``: the 5.17 to 6.5 series (and distro kernels built from them, some with TDX backports): no root
  ``misc.current`` (usage is only visible per child), no ``misc.peak``, no ``misc.events.local``.
* ``no-misc``: ``CONFIG_CGROUP_MISC`` unset; there is no misc file at all and ``cgroup.controllers``
  does not list ``misc``.

Simplification: the exact release where each file appeared differs between upstream and distro
kernels; a profile is a coherent set of features, not a precise version.
"""

from __future__ import annotations

from dataclasses import dataclass

from teesim._collection import MISC_RESOURCES

# The kernel's misc_res_name[] order; every file prints resources in this order.
RESOURCE_ORDER: tuple[str, ...] = MISC_RESOURCES


@dataclass(frozen=True)
class KernelProfile:
    """The misc-cgroup feature set of one kernel generation."""

    name: str
    release: str
    description: str
    has_misc: bool
    root_current: bool
    peak: bool
    events_local: bool
    # cgroup.controllers of the unified hierarchy, in the kernel's order.
    controllers: tuple[str, ...]


CURRENT = KernelProfile(
    name="current",
    release="6.16.0-teesim",
    description="6.16+: tdx resource, root misc.current and misc.peak, misc.events.local",
    has_misc=True,
    root_current=True,
    peak=True,
    events_local=True,
    controllers=("cpuset", "cpu", "io", "memory", "hugetlb", "pids", "rdma", "misc"),
)
OLD = KernelProfile(
    name="old",
    release="6.1.0-teesim",
    description="pre-6.6: misc.current on children only, no misc.peak, no misc.events.local",
    has_misc=True,
    root_current=False,
    peak=False,
    events_local=False,
    controllers=("cpuset", "cpu", "io", "memory", "hugetlb", "pids", "rdma", "misc"),
)
NO_MISC = KernelProfile(
    name="no-misc",
    release="5.10.0-teesim",
    description="CONFIG_CGROUP_MISC unset: no misc controller",
    has_misc=False,
    root_current=False,
    peak=False,
    events_local=False,
    controllers=("cpuset", "cpu", "io", "memory", "hugetlb", "pids", "rdma"),
)

PROFILES: dict[str, KernelProfile] = {p.name: p for p in (CURRENT, OLD, NO_MISC)}


def get_profile(name: str) -> KernelProfile:
    """Return the profile called ``name`` or raise ``ValueError`` listing the valid names."""
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown kernel profile {name!r}; choose one of {', '.join(PROFILES)}") from None
