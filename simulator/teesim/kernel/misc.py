"""The misc cgroup controller (``kernel/cgroup/misc.c``) that counts TEE keys.

KVM charges one unit of ``tdx`` (a TDX HKID, ``arch/x86/kvm/vmx/tdx.c``), ``sev`` or ``sev_es`` (an ASID,
``arch/x86/kvm/svm/sev.c``; SEV-ES *and* SEV-SNP guests charge ``sev_es``) to the cgroup of the process that
creates the guest, and uncharges it when the guest is destroyed. This module reproduces the controller's
accounting and the text of its files:

* ``try_charge`` walks from the cgroup to the root adding the amount at every level; at the first level
  where the new usage exceeds that level's ``misc.max`` or the resource's capacity it fails with ``EBUSY``,
  counts the event (``events.local`` on that cgroup, ``events`` on it and every ancestor below the root)
  and rolls back every level it touched. Levels passed before the failing one keep their raised
  watermark, as the kernel's do. A resource with zero capacity gives ``EINVAL``.
* ``render`` prints exactly what ``seq_printf`` prints: ``misc.capacity`` (root only, non-zero capacities),
  ``misc.current`` / ``misc.peak`` (resources with a capacity or a non-zero value), ``misc.max`` (children
  only, resources with a capacity, ``max`` for no limit), ``misc.events`` / ``misc.events.local``
  (children only, ``<res>.max N``). Which files exist depends on the :class:`KernelProfile`.

Simplifications: no processes (a charge names its cgroup directly), no atomics (the simulator is
single-threaded, so the kernel's transient over-count during a failing charge is never observable), and a
cgroup holding a charge cannot be removed (the kernel keeps the css alive until the guest is gone).
"""

from __future__ import annotations

import errno
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from mypy_extensions import mypyc_attr

from teesim._collection import U64_MAX, canonical_resource
from teesim.kernel.profiles import CURRENT, RESOURCE_ORDER, KernelProfile

ROOT = ""


# A subclass of a builtin type: a plain Python class in the native build (teesim._native).
@mypyc_attr(native_class=False)
class ChargeError(OSError):
    """A charge the kernel refused: ``errno`` is ``EBUSY`` (limit hit) or ``EINVAL`` (no capacity)."""

    def __init__(self, err: int, cgroup: str, resource: str, amount: int, failed_at: str | None, why: str):
        where = failed_at if failed_at is not None else cgroup
        super().__init__(err, f"{resource}: cannot charge {amount} to /{cgroup}: {why} at /{where}")
        self.cgroup = cgroup
        self.resource = resource
        self.amount = amount
        self.failed_at = failed_at


@dataclass
class _Counter:
    """``struct misc_res``: one resource in one cgroup."""

    max: int = U64_MAX
    usage: int = 0
    watermark: int = 0
    events: int = 0
    events_local: int = 0


@dataclass
class _Cgroup:
    path: str
    parent: _Cgroup | None
    children: dict[str, _Cgroup] = field(default_factory=dict)
    res: dict[str, _Counter] = field(default_factory=lambda: {r: _Counter() for r in RESOURCE_ORDER})

    def lineage(self) -> Iterator[_Cgroup]:
        """This cgroup, then each ancestor up to and including the root."""
        node: _Cgroup | None = self
        while node is not None:
            yield node
            node = node.parent


def _check_resource(resource: str) -> str:
    name = canonical_resource(resource)
    if name not in RESOURCE_ORDER:
        raise ValueError(f"unknown misc resource {resource!r}; the kernel has {', '.join(RESOURCE_ORDER)}")
    return name


def _norm(path: str) -> str:
    return "/".join(part for part in path.split("/") if part)


class MiscController:
    """One host's misc controller: capacities plus a cgroup tree of counters."""

    def __init__(self, capacity: Mapping[str, int] | None = None, profile: KernelProfile = CURRENT):
        if not profile.has_misc:
            raise ValueError(f"kernel profile {profile.name!r} has no misc controller")
        self.profile = profile
        self._capacity: dict[str, int] = dict.fromkeys(RESOURCE_ORDER, 0)
        self._root = _Cgroup(ROOT, None)
        self._cgroups: dict[str, _Cgroup] = {ROOT: self._root}
        # Bumped by every change to what the files say, so a reader can tell "unchanged" without
        # rendering (a simulated plugin polls every second on every node; the text rarely changes).
        self.revision = 0
        # The same for misc.capacity alone (NFD reads nothing else; guests never change it).
        self.capacity_revision = 0
        # The same for the misc.current files a usage reader reads: the root's, or on a kernel
        # without it each top-level cgroup's (which ones exist, and their usage). A failed charge
        # moves ``revision`` (misc.events, a guest's scope made and removed) but not this: a plugin
        # polling misc.current every second need not parse it again after each failed launch.
        self.current_revision = 0
        for resource, value in (capacity or {}).items():
            self.set_capacity(resource, value)

    # -- configuration -------------------------------------------------------------------------
    def set_capacity(self, resource: str, capacity: int) -> None:
        """``misc_cg_set_capacity``: what the KVM module sets at load time."""
        name = _check_resource(resource)
        if not 0 <= capacity <= U64_MAX:
            raise ValueError(f"{name}: capacity {capacity} outside 0..U64_MAX")
        self._capacity[name] = capacity
        self.revision += 1
        self.capacity_revision += 1
        self.current_revision += 1  # a resource with capacity gets a line

    def capacity(self, resource: str) -> int:
        return self._capacity[self._name(resource)]

    def resources(self) -> list[str]:
        """Resources with a non-zero capacity, in kernel order."""
        return [r for r in RESOURCE_ORDER if self._capacity[r]]

    def ensure_cgroup(self, path: str) -> str:
        """``mkdir -p`` under the controller root; returns the normalised path."""
        if path in self._cgroups:
            return path  # already there, and the key of an existing cgroup is normalised
        if "//" in path or path.startswith("/") or path.endswith("/"):
            path = _norm(path)  # what the kernel's path walk makes of it; a guest's scope is already clean
        parent_path, _, leaf = path.rpartition("/")
        parent = self._cgroups.get(parent_path)
        if parent is not None:
            # The usual case, a guest's scope under an existing slice: one new cgroup, no walk from the
            # root (the walk below would find the same parent and create the same child).
            child = parent.children[leaf] = _Cgroup(path, parent)
            self._cgroups[path] = child
            self.revision += 1
            if parent is self._root:
                self.current_revision += 1
            return path
        node = self._root
        built = []
        for part in path.split("/") if path else []:
            built.append(part)
            found = node.children.get(part)
            if found is not None:
                child = found
            else:
                child = _Cgroup("/".join(built), node)
                node.children[part] = child
                self._cgroups[child.path] = child
                self.revision += 1
                if node is self._root:
                    self.current_revision += 1
            node = child
        return path

    def remove_cgroup(self, path: str) -> None:
        """``rmdir``: refused with ``EBUSY`` while it has children or still holds a charge."""
        node = self._get(path)
        if node is self._root:
            raise OSError(errno.EBUSY, "the root cgroup cannot be removed")
        if node.children or any(c.usage for c in node.res.values()):
            raise OSError(errno.EBUSY, f"/{node.path} has children or charged guests")
        assert node.parent is not None
        del node.parent.children[node.path.rsplit("/", 1)[-1]]
        del self._cgroups[node.path]
        self.revision += 1
        if node.parent is self._root:
            self.current_revision += 1

    def cgroups(self) -> list[str]:
        """Every cgroup path, parents before children, siblings sorted."""
        out: list[str] = []
        stack = [self._root]
        while stack:
            node = stack.pop()
            out.append(node.path)
            stack.extend(node.children[name] for name in sorted(node.children, reverse=True))
        return out

    def has_cgroup(self, path: str) -> bool:
        return path in self._cgroups or _norm(path) in self._cgroups

    def set_max(self, path: str, resource: str, value: int | None) -> None:
        """Write ``<res> <value>`` (``None`` = ``max``) to a child's ``misc.max``."""
        node = self._get(path)
        name = _check_resource(resource)
        if node is self._root:
            raise OSError(errno.ENOENT, "misc.max does not exist on the root cgroup")
        limit = U64_MAX if value is None else value
        if not 0 <= limit <= U64_MAX:
            raise OSError(errno.ERANGE, f"{name}: {value} is outside the u64 range")
        if not self._capacity[name]:
            raise OSError(errno.EINVAL, f"{name} has no capacity on this host")
        node.res[name].max = limit
        self.revision += 1

    # -- accounting ---------------------------------------------------------------------------
    def try_charge(self, path: str, resource: str, amount: int = 1) -> None:
        """``misc_cg_try_charge``; raises :class:`ChargeError` and leaves usage unchanged on failure."""
        node = self._get(path)
        name = self._name(resource)
        if amount < 0:
            raise ValueError("amount must be >= 0")
        capacity = self._capacity[name]
        if not capacity:
            raise ChargeError(errno.EINVAL, node.path, name, amount, None, "resource has no capacity")
        if not amount:
            return
        # Success raises usage and maybe watermarks, failure counts events: the files change either way.
        self.revision += 1
        charged: list[_Counter] = []
        level: _Cgroup | None = node
        while level is not None:
            counter = level.res[name]
            counter.usage += amount
            charged.append(counter)
            if counter.usage > counter.max or counter.usage > capacity:
                why = "misc.max reached" if counter.usage > counter.max else "capacity reached"
                self._event(level, name)
                for undo in charged:
                    undo.usage -= amount
                raise ChargeError(errno.EBUSY, node.path, name, amount, level.path, why)
            if counter.usage > counter.watermark:
                counter.watermark = counter.usage
            level = level.parent
        self.current_revision += 1  # charged: a failure above undid every level's usage

    def uncharge(self, path: str, resource: str, amount: int = 1) -> None:
        """``misc_cg_uncharge``; going below zero is a model bug (the kernel WARNs)."""
        node = self._get(path)
        name = self._name(resource)
        if any(level.res[name].usage < amount for level in node.lineage()):
            raise ValueError(f"{name}: uncharging {amount} from /{node.path} would make usage negative")
        self.revision += 1
        self.current_revision += 1
        for level in node.lineage():
            level.res[name].usage -= amount

    @staticmethod
    def _event(failed: _Cgroup, name: str) -> None:
        failed.res[name].events_local += 1
        # The kernel's loop stops before the root (it has no parent), and the root has no events file.
        for level in failed.lineage():
            if level.parent is None:
                break
            level.res[name].events += 1

    # -- queries -----------------------------------------------------------------------------
    def usage(self, resource: str, path: str = ROOT) -> int:
        return self._get(path).res[self._name(resource)].usage

    def peak(self, resource: str, path: str = ROOT) -> int:
        return self._get(path).res[_check_resource(resource)].watermark

    def events(self, resource: str, path: str, local: bool = False) -> int:
        counter = self._get(path).res[_check_resource(resource)]
        return counter.events_local if local else counter.events

    def max(self, resource: str, path: str) -> int:
        return self._get(path).res[_check_resource(resource)].max

    def free(self, resource: str) -> int:
        name = _check_resource(resource)
        return max(self._capacity[name] - self._root.res[name].usage, 0)

    def _get(self, path: str) -> _Cgroup:
        node = self._cgroups.get(path)  # most callers pass the normalised path
        if node is not None:
            return node
        key = _norm(path)
        try:
            return self._cgroups[key]
        except KeyError:
            raise OSError(errno.ENOENT, f"no cgroup /{key}") from None

    def _name(self, resource: str) -> str:
        return resource if resource in self._capacity else _check_resource(resource)

    # -- files ---------------------------------------------------------------------------------
    def _lines(self, node: _Cgroup, attr: str) -> str:
        out = []
        for name in RESOURCE_ORDER:
            value = getattr(node.res[name], attr)
            if self._capacity[name] or value:
                key = f"{name}.max" if attr.startswith("events") else name
                out.append(f"{key} {value}\n")
        return "".join(out)

    def _max_lines(self, node: _Cgroup) -> str:
        out = []
        for name in RESOURCE_ORDER:
            if self._capacity[name]:
                limit = node.res[name].max
                out.append(f"{name} {'max' if limit == U64_MAX else limit}\n")
        return "".join(out)

    def render(self, cgroup: str | None = None) -> dict[str, str]:
        """Every misc file as the kernel prints it, keyed by path relative to the controller root.

        With ``cgroup`` only that cgroup's files (readers polling the root need nothing else).
        """
        files: dict[str, str] = {}
        profile = self.profile
        for path in self.cgroups() if cgroup is None else [self._get(cgroup).path]:
            node = self._cgroups[path]
            prefix = f"{path}/" if path else ""
            if node is self._root:
                files["misc.capacity"] = "".join(
                    f"{name} {self._capacity[name]}\n" for name in RESOURCE_ORDER if self._capacity[name]
                )
                if profile.root_current:
                    files["misc.current"] = self._lines(node, "usage")
                if profile.peak:
                    files["misc.peak"] = self._lines(node, "watermark")
                continue
            files[f"{prefix}misc.max"] = self._max_lines(node)
            files[f"{prefix}misc.current"] = self._lines(node, "usage")
            if profile.peak:
                files[f"{prefix}misc.peak"] = self._lines(node, "watermark")
            files[f"{prefix}misc.events"] = self._lines(node, "events")
            if profile.events_local:
                files[f"{prefix}misc.events.local"] = self._lines(node, "events_local")
        return files
