# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""KubeVirt confidential-computing configuration: the KubeVirt CR, or the HyperConverged CR that owns it.

Upstream facts this follows (kubevirt/kubevirt @d923fdb, hyperconverged-cluster-operator @03da3cf, 2026-08):

* Feature gates ``WorkloadEncryptionTDX`` (alpha), ``WorkloadEncryptionSEV`` (beta), ``VSOCK`` (alpha)
  (``pkg/virt-config/featuregate/active.go``). An explicit enable wins over an explicit disable, but
  virt-operator's admission rejects a gate listed in both ``featureGates`` and ``disabledFeatureGates``.
* ``spec.configuration.confidentialCompute.tdx.attestation{enforced, qgsSocketPath}``; defaults
  ``false`` and ``/var/run/tdx-qgs/qgs.socket`` (``pkg/virt-config/virt-config.go``). Enforced makes the
  TDX device plugin health-check the socket: without it every ``devices.kubevirt.io/tdx`` device on the
  node is Unhealthy (``device-manager/socket_device.go``).
* ``featureGates`` and ``permittedHostDevices.*`` are atomic lists (the OpenAPI marks them
  ``x-kubernetes-list-type: atomic``): a merge patch replaces them whole, so they are merged here.
* ``spec.workloads.nodePlacement`` is applied to the virt-handler DaemonSet
  (``pkg/virt-operator/resource/apply/apps.go``).
* HCO reverts direct edits of the KubeVirt CR. It owns ``permittedHostDevices`` (v1beta1 ``spec``, v1
  ``spec.virtualization``, with ``pciDeviceSelector``) and workload placement (v1beta1
  ``spec.workloads.nodePlacement``, v1 ``spec.deployment.nodePlacements.workload``). KubeVirt gates it does
  not expose go through the ``kubevirt.kubevirt.io/jsonpatch`` annotation, an RFC 6902 patch HCO applies to
  the KubeVirt spec it generates. HCO lists every KubeVirt beta gate it does not enable in
  ``disabledFeatureGates`` (``controllers/handlers/kubevirt.go``), so enabling ``WorkloadEncryptionSEV``
  also removes it from there, guarded by a ``test`` operation.
* virt-handler serves ``devices.kubevirt.io/sev`` on every node with ``/dev/sev`` whenever
  ``WorkloadEncryptionSEVEnabled()`` (``pkg/virt-handler/device-manager/device_controller.go``
  ``updatePermittedHostDevicePlugins``, read at kubevirt/kubevirt 5fe600a): a cluster-wide switch, no per-node one.
  ``IsFeatureGateEnabled`` (``pkg/virt-config/feature-gates.go``) reads an explicit ``featureGates`` entry first,
  then ``disabledFeatureGates``, then the gate's default; ``WorkloadEncryptionSEV`` is Beta, on by default, since
  July 2026. So a KubeVirt CR this collection renders for any purpose (GPU passthrough, TDX) lists
  ``WorkloadEncryptionSEV`` in ``disabledFeatureGates`` unless some node uses KubeVirt's SEV pool, and where the
  gate is on (wanted, or enabled by the user) virt-handler is kept off every SNP node whose keys Kata counts
  through NFD, or the node gets a second advertiser.
* ``featureGates`` is an atomic list: an empty ``featureGates: []`` in a server-side-apply manifest would claim it
  and wipe gates others set, so the lists are emitted only when they hold something this collection sets.
* KubeVirt serves ``devices.kubevirt.io/tdx`` from v1.9.0 (v1.8 has no TDX device plugin): with an older KubeVirt,
  a TDX pool planned on KubeVirt would not exist, so it is refused; an unknown version is said, not assumed.
"""

from __future__ import annotations

import json
import re

from ansible_collections.confidential.tee.plugins.module_utils.cluster.inputs import parse_version
from ansible_collections.confidential.tee.plugins.module_utils.common.errors import TeeError
from ansible_collections.confidential.tee.plugins.module_utils.common.tee import KUBEVIRT_TDX, QGS_SOCKET
from ansible_collections.confidential.tee.plugins.module_utils.common.text import NAMES_SHOWN, name_list

DEFAULT_QGS_SOCKET = QGS_SOCKET
JSONPATCH_ANNOTATION = "kubevirt.kubevirt.io/jsonpatch"
TDX_GATE = "WorkloadEncryptionTDX"
SEV_GATE = "WorkloadEncryptionSEV"
VSOCK_GATE = "VSOCK"
OWNED_GATES = (TDX_GATE, SEV_GATE, VSOCK_GATE)
# KubeVirt's beta gates among ours (active.go; HCO's kv-beta-feature-gates.json agrees). Only beta gates
# are on by default, so only they appear in the disabledFeatureGates HCO writes.
BETA_GATES = (SEV_GATE,)
ATTESTATION_MODES = ("auto", "enforced", "disabled")
# The first KubeVirt release with the TDX device plugin (devices.kubevirt.io/tdx).
TDX_MIN_VERSION = (1, 9, 0)
FG_PATH = "/spec/configuration/developerConfiguration/featureGates"
DISABLED_PATH = "/spec/configuration/developerConfiguration/disabledFeatureGates"
CC_PATH = "/spec/configuration/confidentialCompute"
PCI_SELECTOR = re.compile(r"^[0-9A-Fa-f]{4}:[0-9A-Fa-f]{4}\Z")
RESOURCE_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?\Z")


class KubeVirtConfigError(TeeError):
    """A configuration that would not work; the message names the field and how to fix it."""


# --- TDX attestation --------------------------------------------------------------------------------


def _qgs_state(fact, socket_path: str):
    """``True``/``False`` when ``tee_host_info``'s qgs fact answers for ``socket_path``, else ``None`` + why."""
    if not isinstance(fact, dict):
        return None, "no tee_host_info qgs fact"
    if fact.get("path") != socket_path:
        return None, "tee_host_info checked %s, not %s" % (fact.get("path"), socket_path)
    if fact.get("is_socket") is True:
        return True, "socket present"
    if fact.get("present") is True:
        return False, "%s exists but is not a socket" % socket_path
    if fact.get("present") is None:
        return None, "tee_host_info could not tell whether %s exists" % socket_path
    return False, "%s does not exist" % socket_path


def _evidence_text(nodes, evidence: dict, shown=None) -> str:
    """Why each node lacks a confirmed socket, one entry per distinct reason (in the order of its first node) with
    the nodes it holds for: thousands of nodes without facts make one entry, not thousands."""
    reasons: dict = {}
    order = []
    for node in nodes:
        if evidence[node] not in reasons:
            reasons[evidence[node]] = []
            order.append(evidence[node])
        reasons[evidence[node]].append(node)
    # An error names every node (each must be fixed); a warning names a few (``shown``) and counts the rest.
    return "; ".join(
        "%s: %s" % (", ".join(reasons[why]) if shown is None else name_list(reasons[why], shown), why) for why in order
    )


def tdx_attestation(tdx_nodes, qgs_facts, mode: str = "auto", socket_path: str = DEFAULT_QGS_SOCKET) -> dict:
    """Whether to enforce TDX attestation, from each selected node's ``tee_host_info`` ``host.qgs`` fact.

    ``auto`` enforces only when every node in ``tdx_nodes`` reports a socket at ``socket_path``;
    ``enforced`` fails when one does not; ``disabled`` never enforces. Returns the decision with the
    per-node evidence and warnings.
    """
    if mode not in ATTESTATION_MODES:
        raise KubeVirtConfigError(
            "the TDX attestation mode must be one of %s, got %r" % (", ".join(ATTESTATION_MODES), mode),
            option="attestation_mode",
        )
    if not isinstance(socket_path, str) or not socket_path.startswith("/") or "\0" in socket_path:
        raise KubeVirtConfigError(
            "the QGS socket path must be an absolute path on the nodes, got %r: virt-handler and the device plugin "
            "look for it there; set it to a path such as %s" % (socket_path, DEFAULT_QGS_SOCKET),
            option="qgs_socket_path",
        )
    facts = qgs_facts or {}
    evidence, missing, unknown = {}, [], []
    for node in tdx_nodes:
        state, why = _qgs_state(facts.get(node), socket_path)
        evidence[node] = why
        if state is None:
            unknown.append(node)
        elif not state:
            missing.append(node)
    lacking = missing + unknown
    warnings = []
    if not tdx_nodes:
        enforced, reason = False, "no node runs KubeVirt's TDX device plugin"
    elif mode == "disabled":
        enforced, reason = False, "disabled by configuration"
        warnings.append(
            "TDX attestation is not enforced: TDX VMIs start on nodes without a Quote Generation Service and "
            "cannot produce quotes there"
        )
    elif not lacking:
        enforced, reason = True, "QGS socket %s present on %s" % (socket_path, name_list(tdx_nodes))
    elif mode == "enforced":
        raise KubeVirtConfigError(
            "TDX attestation enforced, but the QGS socket is not confirmed on %s (%s). With enforced: true "
            "virt-handler marks every %s device Unhealthy there and no TDX VMI (nor Kata pod "
            "charging that resource) can start. Install and start qgsd (Intel DCAP) on those nodes and re-read "
            "them with tee_host_info, or set the attestation mode to auto"
            % (", ".join(lacking), _evidence_text(lacking, evidence), KUBEVIRT_TDX),
            option="attestation_mode",
        )
    else:
        enforced, reason = False, "QGS socket not confirmed on %s" % name_list(lacking)
        warnings.append(
            "TDX attestation left unenforced because the QGS socket is not confirmed on %s (%s): TDX VMIs there "
            "start without a quote service; enforce it once qgsd runs on every TDX node"
            % (name_list(lacking), _evidence_text(lacking, evidence, NAMES_SHOWN))
        )
    return {
        "enforced": enforced,
        "qgsSocketPath": socket_path,
        "reason": reason,
        "missing": missing,
        "unknown": unknown,
        "evidence": evidence,
        "warnings": warnings,
    }


# --- merges of atomic lists -------------------------------------------------------------------------


def merge_gates(existing, wanted):
    """``existing`` with every gate of ``wanted`` appended once, order kept."""
    out = list(existing or [])
    out += [gate for gate in wanted if gate not in out]
    return out


def gpu_devices(devices) -> list:
    """Validated ``permittedHostDevices.pciHostDevices`` entries (KubeVirt field names)."""
    out = []
    for index, dev in enumerate(devices or []):
        where = "gpu_devices[%d]" % index
        if not isinstance(dev, dict):
            raise KubeVirtConfigError(
                "%s must be a mapping with pci_vendor_selector and resource_name" % where, option="gpu_devices"
            )
        selector = dev.get("pci_vendor_selector")
        if not isinstance(selector, str) or not PCI_SELECTOR.match(selector):
            raise KubeVirtConfigError(
                "%s.pci_vendor_selector %r must be vendor:device in hex, such as 10DE:2330 (lspci -nn)"
                % (where, selector),
                option="gpu_devices",
            )
        name = dev.get("resource_name")
        if not isinstance(name, str) or not RESOURCE_NAME.match(name):
            raise KubeVirtConfigError(
                "%s.resource_name %r must be a qualified resource name such as nvidia.com/GH100_H100_SXM5_80GB"
                % (where, name),
                option="gpu_devices",
            )
        entry = {"pciVendorSelector": selector.upper(), "resourceName": name}
        if dev.get("external_resource_provider", True):
            entry["externalResourceProvider"] = True
        out.append(entry)
    names = [d["resourceName"] for d in out]
    if len(set(names)) != len(names):
        raise KubeVirtConfigError("gpu_devices lists a resource_name twice: %s" % names, option="gpu_devices")
    return out


def merge_devices(existing, wanted, key: str = "resourceName") -> list:
    """Existing entries whose ``key`` we do not manage, then ours (ours replace same-key entries)."""
    ours = {d[key] for d in wanted}
    return [d for d in (existing or []) if d.get(key) not in ours] + list(wanted)


def _is_ours(expr) -> bool:
    return isinstance(expr, dict) and expr.get("key") == "metadata.name" and expr.get("operator") == "NotIn"


def merge_placement(existing, excluded) -> dict:
    """``existing`` nodePlacement with virt-handler kept off ``excluded`` nodes.

    Node selector terms are ORed, so the exclusion (a ``matchFields metadata.name NotIn`` expression) is
    added to every term; a previous exclusion of ours is replaced, everything else is kept.
    """
    placement = json.loads(json.dumps(existing or {}))
    affinity = placement.setdefault("affinity", {})
    node_affinity = affinity.setdefault("nodeAffinity", {})
    required = node_affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.get("nodeSelectorTerms") or [{}]
    for term in terms:
        fields = [f for f in term.get("matchFields", []) if not _is_ours(f)]
        if excluded:
            fields.append({"key": "metadata.name", "operator": "NotIn", "values": sorted(excluded)})
        if fields:
            term["matchFields"] = fields
        else:
            term.pop("matchFields", None)
    terms = [t for t in terms if t]
    if terms:
        required["nodeSelectorTerms"] = terms
    else:
        # Nothing left to require: drop the empty scaffolding rather than leave an unsatisfiable term.
        node_affinity.pop("requiredDuringSchedulingIgnoredDuringExecution")
        if not node_affinity:
            affinity.pop("nodeAffinity")
        if not affinity:
            placement.pop("affinity")
    return placement


# --- the desired KubeVirt configuration ------------------------------------------------------------


def tdx_version(tdx_nodes, version) -> list:
    """Warnings about the KubeVirt version for a TDX pool on KubeVirt; refused when KubeVirt is older than v1.9.0.

    ``version`` is the live CR's ``status.observedKubeVirtVersion`` or ``kubevirt_cc_version``; ``None`` is unknown.
    """
    if not tdx_nodes:
        return []
    parsed = parse_version(version)
    if version is not None and parsed is None:
        raise KubeVirtConfigError(
            "kubevirt_cc_version must be a version such as v1.9.0, got %r" % (version,), option="kubevirt_version"
        )
    if parsed is None:
        return [
            "KubeVirt's version is unknown (no API access and no kubevirt_cc_version): the TDX pool on %s needs "
            "KubeVirt v1.9.0 or later (v1.8 has no devices.kubevirt.io/tdx plugin); set kubevirt_cc_version to check"
            % name_list(tdx_nodes)
        ]
    if parsed < TDX_MIN_VERSION:
        raise KubeVirtConfigError(
            "KubeVirt %s has no TDX device plugin (devices.kubevirt.io/tdx arrives in v1.9.0), so the TDX pool planned "
            "on KubeVirt for %s would not exist and TDX VMIs and Kata pods charging it would never schedule. Upgrade "
            "KubeVirt to v1.9.0 or later, or remove kubevirt from those nodes' tee_node_consumers and set "
            "tee_key_pool_mode: nfd (NFD's tdx.intel.com/keys is then the pool)" % (version, name_list(tdx_nodes))
        )
    return []


def sev_nfd_nodes(plan: dict) -> list:
    """SNP nodes whose keys Kata counts through NFD: virt-handler's SEV plugin must never run there.

    The plan's NFD section lists them (``nfd.snp.resource_nodes``), so the per-node map is not read: the cluster
    playbook hands the roles the plan without it (issue 31).
    """
    return sorted((plan.get("nfd") or {}).get("snp", {}).get("resource_nodes") or [])


def desired(plan: dict, attestation: dict, devices: list, vsock: bool = True) -> dict:
    """What this collection sets, independent of who applies it (KubeVirt CR or HCO)."""
    gates = list(plan["kubevirt"]["feature_gates"])
    if vsock and gates:
        gates.append(VSOCK_GATE)
    out = {
        "feature_gates": gates,
        "excluded_nodes": list(plan["kubevirt"]["excluded_nodes"]),
        "devices": devices,
        # WorkloadEncryptionSEV is Beta (on by default): off unless a node uses KubeVirt's SEV pool.
        "disabled_gates": [] if SEV_GATE in gates else [SEV_GATE],
        "sev_nfd_nodes": sev_nfd_nodes(plan),
    }
    if TDX_GATE in gates:
        out["confidential_compute"] = {
            "tdx": {"attestation": {"enforced": attestation["enforced"], "qgsSocketPath": attestation["qgsSocketPath"]}}
        }
    return out


def kubevirt_spec(want: dict, base_spec) -> tuple:
    """``(spec fragment, warnings)`` for the KubeVirt CR, merged over the live or given ``base_spec``."""
    base = base_spec or {}
    config = base.get("configuration") or {}
    dev = config.get("developerConfiguration") or {}
    warnings = []
    gates = merge_gates(dev.get("featureGates"), want["feature_gates"])
    disabled = list(dev.get("disabledFeatureGates") or [])
    clash = [g for g in want["feature_gates"] if g in disabled]
    if clash:
        warnings.append(
            "removed %s from disabledFeatureGates: virt-operator rejects a gate that is both enabled and disabled"
            % ", ".join(clash)
        )
    new_disabled = [g for g in disabled if g not in clash]
    excluded = list(want["excluded_nodes"])
    if SEV_GATE in gates:
        # Enabled (by this plan or by the user): the SEV plugin runs wherever virt-handler does.
        excluded = sorted(set(excluded) | set(want.get("sev_nfd_nodes") or []))
    else:
        new_disabled = merge_gates(new_disabled, want.get("disabled_gates") or [])
    developer = {}
    # Only non-empty lists: an empty atomic list in a server-side-apply manifest claims it and wipes others' gates.
    if gates:
        developer["featureGates"] = gates
    if new_disabled != disabled and (new_disabled or disabled):
        developer["disabledFeatureGates"] = new_disabled
    configuration = {"developerConfiguration": developer} if developer else {}
    if "confidential_compute" in want:
        configuration["confidentialCompute"] = want["confidential_compute"]
    if want["devices"]:
        permitted = config.get("permittedHostDevices") or {}
        configuration["permittedHostDevices"] = {
            "pciHostDevices": merge_devices(permitted.get("pciHostDevices"), want["devices"])
        }
    spec = {"configuration": configuration}
    placement = ((base.get("workloads") or {}).get("nodePlacement")) or {}
    if excluded or has_exclusion(placement):
        spec["workloads"] = {"nodePlacement": merge_placement(placement, excluded)}
    want["excluded_nodes"] = excluded
    return spec, warnings


def has_exclusion(placement) -> bool:
    """Whether ``placement`` carries a virt-handler exclusion written by :func:`merge_placement`."""
    affinity = (placement or {}).get("affinity") or {}
    required = (affinity.get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    return any(_is_ours(f) for term in required.get("nodeSelectorTerms") or [] for f in term.get("matchFields") or [])


def kubevirt_object(name: str, namespace: str, spec: dict) -> dict:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "KubeVirt",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }
