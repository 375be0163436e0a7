# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""The TEE registry: one record per confidential-guest technology the collection prepares nodes for.

The CPU vendor (``tee_cpu_vendor``, the ``tee_vendor`` fact) stays what users write and what the host facts
report; :func:`by_vendor` is the one place it becomes a technology. Everything that differs between TDX and
SEV-SNP and is data rather than host probing lives in a :class:`TeeTech`: the key pool (its misc resource and
the names that advertise it), NFD's rule, the Kata RuntimeClasses, KubeVirt's plugin, the host role that owns
the kernel arguments, where the host facts keep the TEE, and the ``teesim`` host profile that simulates it.
The key-pool policy (``pool_policy.py``), the cluster renderers, the fleet report, preflight and ``teesim``
derive their per-vendor tables from :data:`REGISTRY`; the names themselves are ``tee.py``'s vocabulary.

A new TEE is a record here, its names in ``tee.py``, its host facts (``host/host_facts.py``'s probe), its
``teesim`` profile (``simulator/teesim/kernel/tee_hosts.py``) and the vendor in the documented ``choices`` of
``tee_key_pools``; ``tests/unit/plugins/module_utils/common/test_tee_registry_toy.py`` adds a toy one and counts
the files. Standard library only (modules import it through AnsiballZ, ``teesim`` through
``teesim._collection``).

Upstream names, as in ``tee.py``: NFD ``source/cpu/security_amd64.go`` (``tdx.enabled``, ``sev.snp.enabled``)
and the label prefixes ``intel.feature.node.kubernetes.io`` / ``amd.feature.node.kubernetes.io`` of Kata's
shipped rules; kata-deploy chart 4.1.0 ``templates/runtimeclasses.yaml`` (``kata-qemu-<tee>``,
``kata-qemu-nvidia-gpu-<tee>``); KubeVirt ``device_controller.go`` (gates ``WorkloadEncryptionTDX`` /
``WorkloadEncryptionSEV``; the TDX plugin counts ``misc.capacity`` ``tdx``, the SEV one ``--max-devices``).
"""

from __future__ import annotations

from ansible_collections.confidential.tee.plugins.module_utils.common import tee
from ansible_collections.confidential.tee.plugins.module_utils.common.record import Record


class TeeTech(Record):
    """One TEE technology and everything the collection keys on it.

    ``key``: the technology's id; ``short``: its name in the key-pool plan, RuntimeClass names and the host facts
    (``facts["tdx"]``); ``name``: as people read it; ``vendor``: the ``tee_cpu_vendor`` value, ``cpu_vendor``
    the ``vendor_id`` of ``/proc/cpuinfo`` it is read from, ``vendor_name`` how messages name it; ``misc``: the
    misc resource its guests charge (the key pool); ``nfd``: NFD's rule (``rule``, ``label``, ``match``) and the
    extended resource it may publish (``resource`` = ``feature``); ``kubevirt``: virt-handler's ``resource``,
    its feature ``gate``, whether it ``counts_keys`` and what it ``reads``; ``agent_reads``: what the node agent
    sizes the pool from; ``runtime_classes``: Kata's RuntimeClass names, without and with the GPU;
    ``host_role``: the role whose ``<role>_kernel_args`` turn the TEE on; ``preflight``: its section id in the
    preflight verdict (``host/preflight.py``); ``kvm``: its key in the ``kvm`` facts and ``kvm_param`` the KVM
    module parameter that turns it on (what NFD's ``match`` reads); ``teesim_profile``: the simulated host."""

    __slots__ = (
        "agent_reads",
        "cpu_vendor",
        "host_role",
        "key",
        "kubevirt",
        "kvm",
        "kvm_param",
        "misc",
        "name",
        "nfd",
        "preflight",
        "runtime_classes",
        "short",
        "teesim_profile",
        "vendor",
        "vendor_name",
    )
    __hash__ = None  # the nfd and kubevirt parts are dicts

    def __init__(self, key: str, short: str, name: str, vendor: tuple, misc: str, **parts) -> None:
        self.key, self.short, self.name, self.misc = key, short, name, misc
        self.vendor, self.cpu_vendor, self.vendor_name = vendor
        self.nfd, self.kubevirt, self.agent_reads = parts["nfd"], parts["kubevirt"], parts["agent_reads"]
        self.runtime_classes = ("kata-qemu-%s" % short, "kata-qemu-nvidia-gpu-%s" % short)
        self.host_role, self.preflight = parts["host_role"], parts["preflight"]
        self.kvm, self.kvm_param = parts["kvm"]
        self.teesim_profile = parts.get("teesim_profile", key)


# In the order reports and plans list them (Intel first, as tee.MISC_REPORT_ORDER).
REGISTRY = (
    TeeTech(
        "tdx",
        "tdx",
        "TDX",
        (tee.INTEL, "GenuineIntel", "Intel"),
        tee.TDX,
        nfd={
            "rule": "intel.tdx",
            "label": "intel.feature.node.kubernetes.io/tdx",
            "match": "tdx.enabled",
            "resource": tee.NFD_TDX_KEYS,
            "feature": tee.NFD_FEATURE_TDX_KEYS,
        },
        kubevirt={
            "resource": tee.KUBEVIRT_TDX,
            "gate": "WorkloadEncryptionTDX",
            "counts_keys": True,
            "reads": "misc.capacity tdx",
        },
        agent_reads="misc.capacity tdx - keys held outside Kubernetes",
        host_role="tdx_host",
        preflight="tdx",
        kvm=("intel", "tdx"),
    ),
    TeeTech(
        "sev-snp",
        "snp",
        "SEV-SNP",
        (tee.AMD, "AuthenticAMD", "AMD"),
        tee.SEV_ES,
        nfd={
            "rule": "amd.sev-snp",
            "label": "amd.feature.node.kubernetes.io/snp",
            "match": "sev.snp.enabled",
            "resource": tee.NFD_SNP_ESIDS,
            "feature": tee.NFD_FEATURE_SEV_ESIDS,
        },
        # --max-devices slots of /dev/sev, not keys (pool_policy's docstring).
        kubevirt={
            "resource": tee.KUBEVIRT_SEV,
            "gate": "WorkloadEncryptionSEV",
            "counts_keys": False,
            "reads": "virt-handler --max-devices",
        },
        agent_reads="misc.capacity sev_es (ciphertext hiding: the SNP range) - keys held outside Kubernetes",
        host_role="snp_host",
        preflight="sev_snp",
        kvm=("amd", "sev_snp"),
    ),
)

VENDORS = tuple(t.vendor for t in REGISTRY)
SHORT_NAMES = tuple(t.short for t in REGISTRY)
# /proc/cpuinfo vendor_id -> tee_cpu_vendor.
CPU_VENDORS = {t.cpu_vendor: t.vendor for t in REGISTRY}


def by_vendor(vendor: str) -> TeeTech:
    """The TEE of a ``tee_cpu_vendor`` (the one vendor-to-technology mapping); ``KeyError`` for any other."""
    for tech in REGISTRY:
        if tech.vendor == vendor:
            return tech
    raise KeyError("no TEE for CPU vendor %r; the registry has %s" % (vendor, ", ".join(VENDORS)))


def of_vendor(vendor) -> TeeTech | None:
    """The TEE of ``vendor``, ``None`` for an unknown or unset one (facts of a CPU without a supported TEE)."""
    return next((tech for tech in REGISTRY if tech.vendor == vendor), None)


def of_misc(misc: str) -> TeeTech:
    """The TEE whose guests charge the misc resource ``misc`` (``sev_es``: SEV-SNP)."""
    for tech in REGISTRY:
        if tech.misc == misc:
            return tech
    raise KeyError("no TEE charges misc resource %r" % (misc,))


def by_short(short: str) -> TeeTech:
    for tech in REGISTRY:
        if tech.short == short:
            return tech
    raise KeyError("no TEE %r; the registry has %s" % (short, ", ".join(SHORT_NAMES)))


def per_vendor(pick) -> dict:
    """``{vendor: pick(tech)}`` over the registry: how the per-vendor tables of the policy are derived."""
    return {tech.vendor: pick(tech) for tech in REGISTRY}


def vendor_choices(last: str = "or") -> str:
    """``intel or amd``: the vendors as an error message lists them."""
    if len(VENDORS) < 3:
        return (" %s " % last).join(VENDORS)
    return "%s, %s %s" % (", ".join(VENDORS[:-1]), last, VENDORS[-1])
