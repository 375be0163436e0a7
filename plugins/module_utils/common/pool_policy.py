# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""The one key-pool policy: which TEE resources a node has, who advertises them, and what each
``tee_key_pool_mode`` makes every consumer draw from.

Standard library only (modules import it through AnsiballZ, ``teesim`` and the scripts through
``teesim._collection``). Everything that names or decides a mode is derived from the three tables below:
the cluster plan (``cluster/key_pools.py``), the inventory check (``cluster/inputs.py``), the fleet report's
remedies (``fleet/drift.py``), the demo's conclusion (``scripts/demo.py``) and the mapping from a mode to
the ``teesim`` strategy that models it. A test adds a mode here only and checks they all pick it up
(``tests/unit/plugins/module_utils/common/test_pool_policy_toy_mode.py``).

Adding a mode is one :class:`PoolMode` entry in :data:`MODES` (plus an :class:`Advertiser` in
:data:`ADVERTISERS` and a renderer when no existing advertiser serves its pool); its ``strategy`` must name
a ``teesim`` strategy whose ``models`` is the mode (``tests/simulator/strategies/test_policy_modes.py``).

KubeVirt's AMD names (checked in kubevirt ``pkg/virt-handler/device-manager/device_controller.go``,
``updatePermittedHostDevicePlugins``, main of 2026): with ``WorkloadEncryptionSEV`` virt-handler serves the
generic ``/dev/sev`` plugin, ``devices.kubevirt.io/sev``, with ``--max-devices`` devices (``c.maxDevices``),
and every SEV/SEV-ES/SNP VMI's launcher pod requests one. That is the resource the plan renders and checks
for KubeVirt on AMD (:attr:`Advertiser.resources`): it counts slots, not keys (``counts_keys`` false).
Upstream KubeVirt serves no key-counting AMD resource; ``devices.kubevirt.io/sev-esids`` is the SEV-ES ASID
pool of the SNP work that ``teesim`` models and the fleet report recognises where a cluster runs it
(:attr:`Advertiser.key_resources`, ``tee.KUBEVIRT_KEYS``). The two roles are two fields, never one name.
"""

from __future__ import annotations

from ansible_collections.confidential.tee.plugins.module_utils.common import tee, tee_registry
from ansible_collections.confidential.tee.plugins.module_utils.common.record import Record

AUTO = "auto"
KATA, KUBEVIRT, EXTERNAL = tee.KATA, tee.KUBEVIRT, tee.EXTERNAL


class TeeResource(Record):
    """A CPU vendor's confidential guests: their misc pool and the NodeFeatureRule that describes them."""

    __slots__ = ("misc", "nfd_label", "nfd_match", "nfd_rule", "tee", "vendor")

    def __init__(self, vendor: str, tee: str, misc: str, nfd_rule: str, nfd_label: str, nfd_match: str) -> None:
        self.vendor, self.tee, self.misc = vendor, tee, misc
        self.nfd_rule, self.nfd_label, self.nfd_match = nfd_rule, nfd_label, nfd_match


# Per vendor: the TEE whose keys the pool counts (TDX, SEV-SNP), its misc resource, and NFD's rule for it, from the
# TEE registry (common/tee_registry.py).
TEE_RESOURCES = tee_registry.per_vendor(
    lambda t: TeeResource(t.vendor, t.short, t.misc, t.nfd["rule"], t.nfd["label"], t.nfd["match"])
)


class Advertiser(Record):
    """Who publishes a node's pool to the scheduler.

    ``resources``: per vendor, the extended resource the plan renders and charges; ``counts_keys``: per vendor,
    whether its size is the node's key count; ``reads``: per vendor, where the size comes from; ``key_resources``:
    per misc resource, the name under which it counts keys (what the fleet report and ``teesim`` recognise);
    ``counts_usage``: whether it lowers its count by keys in use (``misc.current``); ``brought_by``: the consumer
    whose deployment runs it anyway (``None``: the collection deploys it); ``gates``: per vendor, the feature gate
    that starts it; ``who``: how a plan line names it; ``owner``: the project, as remedies name it."""

    __slots__ = (
        "brought_by",
        "counts_keys",
        "counts_usage",
        "gates",
        "key_resources",
        "name",
        "owner",
        "reads",
        "resources",
        "who",
    )

    def __init__(self, name: str, who: str, resources: dict, counts_keys: dict, reads: dict, **options) -> None:
        self.name, self.who, self.resources, self.counts_keys, self.reads = name, who, resources, counts_keys, reads
        self.owner = options.get("owner", name)
        self.key_resources = options.get("key_resources", {})
        self.counts_usage = options.get("counts_usage", False)
        self.brought_by = options.get("brought_by")
        self.gates = options.get("gates", {})


ADVERTISERS = {
    a.name: a
    for a in (
        # node-feature-discovery source/cpu/security_amd64.go: capacity only, re-read every sleepInterval.
        Advertiser(
            "nfd",
            "NFD (NodeFeatureRule extended resource)",
            tee_registry.per_vendor(lambda t: t.nfd["resource"]),
            tee_registry.per_vendor(lambda t: True),
            tee_registry.per_vendor(lambda t: t.nfd["feature"]),
            key_resources=tee.NFD_KEYS,
            owner="NFD",
        ),
        # kubevirt device_controller.go: misc.capacity tdx read when the plugin starts; on AMD --max-devices slots.
        Advertiser(
            "kubevirt",
            "KubeVirt's virt-handler device plugin",
            tee_registry.per_vendor(lambda t: t.kubevirt["resource"]),
            tee_registry.per_vendor(lambda t: t.kubevirt["counts_keys"]),
            tee_registry.per_vendor(lambda t: t.kubevirt["reads"]),
            key_resources=tee.KUBEVIRT_KEYS,
            brought_by=KUBEVIRT,
            owner="KubeVirt",
            gates=tee_registry.per_vendor(lambda t: t.kubevirt["gate"]),
        ),
        # plugins/module_utils/agent (tee-key-agent): the Node's status at misc.capacity - keys held outside
        # Kubernetes - --reserve, every interval (agent/decision.py is the rule); Kata's names, so Kata's shipped
        # RuntimeClasses request it unchanged and VMIs through the admission policy the cluster role renders.
        Advertiser(
            "agent",
            "the node agent tee-key-agent (Node status: the keys the kernel has free for Kubernetes)",
            tee_registry.per_vendor(lambda t: t.nfd["resource"]),
            tee_registry.per_vendor(lambda t: True),
            tee_registry.per_vendor(lambda t: t.agent_reads),
            key_resources=tee.NFD_KEYS,
            counts_usage=True,
            owner="the node agent",
        ),
    )
}


class PoolMode(Record):
    """One ``tee_key_pool_mode``: the one advertiser of the node's pool and who draws from it.

    ``draws``: the consumers whose guests request the pool's resource (Kata through its RuntimeClass overhead,
    KubeVirt through the launcher pod, external VMs through a reservation); ``refuses``: consumers the mode cannot
    have on its nodes, because they bring an advertiser of their own (a second pool); ``auto``: whether ``auto``
    may choose it (in this table's order); ``strategy``: the ``teesim`` strategy that models it; ``summary``: the
    pool in a few words, for the demo's conclusion."""

    __slots__ = ("advertiser", "auto", "draws", "name", "refuses", "strategy", "summary")

    def __init__(self, name: str, advertiser: str, draws: tuple, refuses: tuple, strategy: str, **options) -> None:
        self.name, self.advertiser, self.draws, self.refuses, self.strategy = name, advertiser, draws, refuses, strategy
        self.auto = options.get("auto", True)
        self.summary = options.get("summary", "one pool")


MODES = (
    # First: the one pool every consumer draws from, VMs outside Kubernetes included (remedies name it first).
    # Never chosen by auto: it needs the agent deployed (role tee_key_agent or the DaemonSet).
    PoolMode(
        "kernel",
        "agent",
        (KATA, KUBEVIRT, EXTERNAL),
        (),
        "kernel-pool",
        auto=False,
        summary="one pool the node agent keeps at what the kernel has free",
    ),
    PoolMode(
        "kubevirt",
        "kubevirt",
        (KATA, KUBEVIRT),
        (),
        "kata-overhead-on-kubevirt",
        summary="one static pool",
    ),
    PoolMode("nfd", "nfd", (KATA,), (KUBEVIRT,), "split-nodes", summary="one NFD pool for Kata, KubeVirt elsewhere"),
)


def mode_names() -> tuple:
    """What ``tee_key_pool_mode`` accepts: ``auto`` and every mode, in the policy's order."""
    return (AUTO, *(m.name for m in MODES))


def mode(name: str) -> PoolMode:
    for candidate in MODES:
        if candidate.name == name:
            return candidate
    raise KeyError("no key-pool mode %r; the policy has %s" % (name, ", ".join(mode_names())))


def advertiser_of(mode_name: str) -> Advertiser:
    return ADVERTISERS[mode(mode_name).advertiser]


def strategies() -> dict:
    """Mode name -> the ``teesim`` strategy that models it."""
    return {m.name: m.strategy for m in MODES}


def problems_of(mode_name: str, vendor: str, consumers) -> list:
    """Why ``mode_name`` cannot serve a node of ``vendor`` with ``consumers``, as ``(kind, consumer)`` pairs:
    ``second_pool`` (the consumer brings an advertiser the mode refuses) or ``no_key_count`` (Kata's overhead would
    draw from an advertiser whose size is not the key count). Empty when it can."""
    chosen = mode(mode_name)
    advertiser = ADVERTISERS[chosen.advertiser]
    found = [("second_pool", c) for c in consumers if c in chosen.refuses]
    if KATA in consumers and KATA in chosen.draws and not advertiser.counts_keys[vendor]:
        found.append(("no_key_count", KATA))
    return found


def auto_mode(vendor: str, consumers) -> str:
    """The mode ``auto`` chooses: the first automatic mode whose advertiser runs anyway (or is the collection's)
    and that serves the node; where none does, the last automatic mode, whose refusal the plan then reports."""
    candidates = [m for m in MODES if m.auto]
    for candidate in candidates:
        brought_by = ADVERTISERS[candidate.advertiser].brought_by
        if (brought_by is None or brought_by in consumers) and not problems_of(candidate.name, vendor, consumers):
            return candidate.name
    return candidates[-1].name


def shared_modes(vendor: str) -> list:
    """Modes in which Kata and KubeVirt share one key-counting pool on ``vendor``'s nodes."""
    return [m.name for m in MODES if not problems_of(m.name, vendor, (KATA, KUBEVIRT))]


def apart_modes(vendor: str) -> list:
    """Modes for Kata-only nodes that keep virt-handler off (KubeVirt runs elsewhere)."""
    return [m.name for m in MODES if KUBEVIRT in m.refuses and not problems_of(m.name, vendor, (KATA,))]


def modes_drawing(consumer: str) -> list:
    """Modes whose pool counts ``consumer``'s keys."""
    return [m.name for m in MODES if consumer in m.draws]
