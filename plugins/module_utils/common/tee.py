# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""The one TEE vocabulary of the collection and of ``teesim``: names that several wings must spell alike.

Standard library only: modules on managed hosts import it through AnsiballZ, ``teesim`` through
``teesim._collection``. No other file spells a misc resource list or an extended-resource name; a test
(``tests/unit/plugins/module_utils/common/test_tee.py``) fails when one does.

Where each name comes from (checked upstream, 2026):

* misc cgroup resources: Linux ``include/linux/misc_cgroup.h`` (``enum misc_res_type``) and
  ``kernel/cgroup/misc.c`` (``misc_res_name``): ``sev``, ``sev_es``, ``tdx``, printed in that order.
  KVM charges ``sev`` for SEV guests and ``sev_es`` for SEV-ES *and* SEV-SNP guests
  (``arch/x86/kvm/svm/sev.c``, ``sev_asid_new``); TDX guests charge ``tdx`` (``arch/x86/kvm/vmx/tdx.c``).
  There is no ``snp`` resource. With AMD ciphertext hiding (``kvm_amd.ciphertext_hiding_asids=N``, 6.18+)
  SNP guests get only ASIDs 1..N of the ``sev_es`` range and SEV-ES guests the rest, while ``misc.capacity``
  and ``misc.current`` still count them together (``host/sev_asids.py``).
* KubeVirt (``pkg/virt-handler/device-manager/device_controller.go``, ``pkg/virt-controller/services/
  renderresources.go``): ``devices.kubevirt.io/tdx`` (one device per ``misc.capacity`` ``tdx`` key,
  feature gate ``WorkloadEncryptionTDX``), ``devices.kubevirt.io/sev`` (the ``/dev/sev`` device,
  ``--max-devices`` slots, 1000 by default; counts no ASID), ``devices.kubevirt.io/sev-esids`` (the SNP
  work's SEV-ES ASID pool) and the generic ``kvm``, ``tun`` and ``vhost-net`` devices every
  virt-handler node has.
* NFD (node-feature-discovery ``source/cpu/security_amd64.go`` and the NodeFeatureRule
  ``extendedResources`` Kata's docs ship): ``tdx.intel.com/keys`` = ``@cpu.security.tdx.total_keys``,
  ``sev-snp.amd.com/esids`` = ``@cpu.security.sev.encrypted_state_ids``; ``@cpu.security.sev.asids``
  is the SEV pool, which a rule may publish under any name (``teesim``'s demo uses ``sev.amd.com/asids``).
  Kata's RuntimeClasses request the NFD names in ``overhead.podFixed`` (kata-deploy
  ``tools/packaging/kata-deploy/binary/src/k8s/runtimeclasses.rs``).
* Intel's SGX device plugin (intel-device-plugins-for-kubernetes ``cmd/sgx_plugin``):
  ``sgx.intel.com/enclave`` and ``sgx.intel.com/provision``, which the attestation services request.
"""

from __future__ import annotations

from ansible_collections.confidential.tee.plugins.module_utils.common.record import Record

# QGS and its socket ----------------------------------------------------------------------------------

# Intel DCAP's QGS listens here when it serves the Unix socket (server_main.cpp, every release that has one);
# QEMU (KubeVirt's virt-launcher, Kata 3.32+) connects to this path.
QGS_SOCKET = "/var/run/tdx-qgs/qgs.socket"

# misc cgroup resources -------------------------------------------------------------------------------

SEV = "sev"
SEV_ES = "sev_es"
TDX = "tdx"
# The kernel's order (enum misc_res_type), which is also the order misc.* files print them in.
MISC_RESOURCES = (SEV, SEV_ES, TDX)
# The order reports list key pools in: Intel first, then AMD from the oldest technology.
MISC_REPORT_ORDER = (TDX, SEV, SEV_ES)
# Names users write for the pool SEV-SNP guests charge (there is no ``snp`` misc resource).
MISC_ALIASES = {"snp": SEV_ES, "sev_snp": SEV_ES}

INTEL = "intel"
AMD = "amd"
VENDORS = (INTEL, AMD)


class Technology(Record):
    """A TEE technology, its CPU vendor and the misc resource each of its guests charges."""

    __slots__ = ("misc", "name", "vendor")

    def __init__(self, name: str, vendor: str, misc: str) -> None:
        self.name, self.vendor, self.misc = name, vendor, misc


TECHNOLOGIES = (
    Technology("TDX", INTEL, TDX),
    Technology("SEV", AMD, SEV),
    Technology("SEV-ES", AMD, SEV_ES),
    Technology("SEV-SNP", AMD, SEV_ES),
)
MISC_OF_TECHNOLOGY = {tech.name: tech.misc for tech in TECHNOLOGIES}
# The misc resources of each vendor's TEEs, in kernel order.
VENDOR_MISC_RESOURCES = {
    vendor: tuple(m for m in MISC_RESOURCES if any(t.vendor == vendor and t.misc == m for t in TECHNOLOGIES))
    for vendor in VENDORS
}
# The key pool a vendor's confidential guests (TDX, SEV-SNP) draw from.
VENDOR_KEY_POOL = {INTEL: TDX, AMD: SEV_ES}

# Extended resources ----------------------------------------------------------------------------------

KUBEVIRT_TDX = "devices.kubevirt.io/tdx"
KUBEVIRT_SEV = "devices.kubevirt.io/sev"
KUBEVIRT_SEV_ESIDS = "devices.kubevirt.io/sev-esids"
KUBEVIRT_KVM = "devices.kubevirt.io/kvm"
KUBEVIRT_TUN = "devices.kubevirt.io/tun"
KUBEVIRT_VHOST_NET = "devices.kubevirt.io/vhost-net"
# Every virt-handler node advertises these; a virt-launcher pod requests one of each.
KUBEVIRT_GENERIC_DEVICES = (KUBEVIRT_KVM, KUBEVIRT_TUN, KUBEVIRT_VHOST_NET)
# The /dev/sev device plugin's fixed slot count (virt-handler's --max-devices default).
KUBEVIRT_SEV_SLOTS = 1000

NFD_TDX_KEYS = "tdx.intel.com/keys"
NFD_SNP_ESIDS = "sev-snp.amd.com/esids"
NFD_SEV_ASIDS = "sev.amd.com/asids"

SGX_ENCLAVE = "sgx.intel.com/enclave"
SGX_PROVISION = "sgx.intel.com/provision"

# NFD features a NodeFeatureRule's extendedResources value may name, and the misc pool each counts.
NFD_FEATURE_TDX_KEYS = "@cpu.security.tdx.total_keys"
NFD_FEATURE_SEV_ESIDS = "@cpu.security.sev.encrypted_state_ids"
NFD_FEATURE_SEV_ASIDS = "@cpu.security.sev.asids"
NFD_FEATURES = {NFD_FEATURE_TDX_KEYS: TDX, NFD_FEATURE_SEV_ESIDS: SEV_ES, NFD_FEATURE_SEV_ASIDS: SEV}

# Consumers and the key resource each requests, per misc resource ----------------------------------

KATA = "kata"
KUBEVIRT = "kubevirt"
EXTERNAL = "external"  # VMs outside Kubernetes (libvirt, QEMU): charge the kernel, request nothing
CONSUMERS = (KATA, KUBEVIRT, EXTERNAL)

# NFD's names, which Kata's RuntimeClass overhead requests.
NFD_KEYS = {TDX: NFD_TDX_KEYS, SEV_ES: NFD_SNP_ESIDS}
# KubeVirt's key-counting names, which every TDX / SNP VMI's launcher pod requests.
KUBEVIRT_KEYS = {TDX: KUBEVIRT_TDX, SEV_ES: KUBEVIRT_SEV_ESIDS}
KEY_RESOURCES_OF = {KATA: NFD_KEYS, KUBEVIRT: KUBEVIRT_KEYS, EXTERNAL: {}}


class KeyPool(Record):
    """An extended resource that counts one misc pool's keys, who advertises it and who requests it.

    ``kind``: "nfd" when a NodeFeatureRule publishes a capacity, "plugin" when a device plugin serves devices."""

    __slots__ = ("advertiser", "consumer", "kind", "misc", "resource")

    def __init__(self, resource: str, misc: str, advertiser: str, kind: str, consumer: str) -> None:
        self.resource, self.misc, self.advertiser, self.kind, self.consumer = resource, misc, advertiser, kind, consumer


KEY_POOLS = (
    KeyPool(NFD_TDX_KEYS, TDX, "NFD (cpu.security.tdx.total_keys)", "nfd", KATA),
    KeyPool(KUBEVIRT_TDX, TDX, "KubeVirt TDX device plugin", "plugin", KUBEVIRT),
    KeyPool(NFD_SNP_ESIDS, SEV_ES, "NFD (cpu.security.sev.encrypted_state_ids)", "nfd", KATA),
    KeyPool(KUBEVIRT_SEV_ESIDS, SEV_ES, "KubeVirt SEV-ES ASID plugin", "plugin", KUBEVIRT),
)

# Every extended-resource name above, for the consistency and "spelled elsewhere" tests.
EXTENDED_RESOURCES = (
    KUBEVIRT_TDX,
    KUBEVIRT_SEV,
    KUBEVIRT_SEV_ESIDS,
    KUBEVIRT_KVM,
    KUBEVIRT_TUN,
    KUBEVIRT_VHOST_NET,
    NFD_TDX_KEYS,
    NFD_SNP_ESIDS,
    NFD_SEV_ASIDS,
    SGX_ENCLAVE,
    SGX_PROVISION,
)

# Names that moved in 2026 -------------------------------------------------------------------------

# kata-deploy's chart 4.1 renamed its NodeFeatureRule amd64-tee-keys to kata-tee-keys (templates/
# node-feature-rules.yaml); Helm upgrades create the new rule and leave the old one, so both advertise the keys.
KATA_CHART_RULE = "kata-tee-keys"
KATA_PRE_41_CHART_RULE = "amd64-tee-keys"
STALE_NFD_RULES = {
    KATA_PRE_41_CHART_RULE: "stale rule from the pre-4.1 kata-deploy chart (4.1 renamed it kata-tee-keys)"
}
# GPU Operator up to v25.10 could publish a third key pool: an NFD extended resource under this prefix whose value is
# a TEE key feature (NFD_FEATURES). Any such name counts the same keys a second or third time.
GPU_OPERATOR_LEGACY_PREFIX = "feature.node.kubernetes.io/"
GPU_OPERATOR_LEGACY_UNTIL = "v25.10"
