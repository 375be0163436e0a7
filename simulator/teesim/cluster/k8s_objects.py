"""Kubernetes objects as the API server returns them (``kubectl get -o json``), for simulated nodes.

Nodes, pods, RuntimeClasses and NFD NodeFeatureRules with the fields a real cluster fills in (uids,
resourceVersions, timestamps, node conditions and ``nodeInfo``, pod status), deterministic so that a rebuilt
fleet is byte-identical. ``tests/simulator/cluster`` validates them with ``kubernetes-validate`` (core
objects) and the NFD CRD schema.

Simplifications: no managedFields, no events; the pods' container statuses are omitted.
"""

from __future__ import annotations

import uuid
from typing import Any

from teesim._collection import KUBEVIRT_GENERIC_DEVICES

CREATED = "2026-11-20T08:00:00Z"
HEARTBEAT = "2026-11-24T09:30:00Z"
KUBELET = "v1.34.2"
_NAMESPACE = uuid.UUID("6f1c3a52-7d0e-4c4b-9b3e-1b9f0c7e5a10")


def uid(*parts: str) -> str:
    return str(uuid.uuid5(_NAMESPACE, "/".join(parts)))


def _version(*parts: str) -> str:
    return str(int(uid(*parts)[:6], 16))


def as_list(objects: list[dict[str, Any]]) -> dict[str, Any]:
    """A ``List`` document, the shape of ``kubectl get <kind> -o json``."""
    return {"apiVersion": "v1", "kind": "List", "items": objects, "metadata": {"resourceVersion": ""}}


def node(
    name: str, address: str, labels: dict[str, str], extended: dict[str, str], kernel: str, os_image: str
) -> dict[str, Any]:
    """A Ready worker Node; ``extended`` are extended resources (same capacity and allocatable)."""
    capacity = {
        "cpu": "96",
        "ephemeral-storage": "936827000Ki",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
        "memory": "528012084Ki",
        "pods": "110",
        **extended,
    }
    allocatable = dict(capacity, cpu="95500m", memory="526865204Ki", **{"ephemeral-storage": "863376374614"})
    base_labels = {
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "node-role.kubernetes.io/worker": "",
    }
    conditions = [
        _condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
        _condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        _condition("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        _condition("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
    ]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": uid("node", name),
            "resourceVersion": _version("node", name),
            "creationTimestamp": CREATED,
            "labels": {**base_labels, **labels},
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
        },
        "spec": {
            "podCIDR": f"10.244.{int(address.rsplit('.', 1)[1]) % 250}.0/24",
            "providerID": "baremetal://" + name,
        },
        "status": {
            "capacity": capacity,
            "allocatable": allocatable,
            "conditions": conditions,
            "addresses": [{"type": "InternalIP", "address": address}, {"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "architecture": "amd64",
                "bootID": uid("boot", name),
                "containerRuntimeVersion": "containerd://2.1.4",
                "kernelVersion": kernel,
                "kubeProxyVersion": "",
                "kubeletVersion": KUBELET,
                "machineID": uid("machine", name).replace("-", ""),
                "operatingSystem": "linux",
                "osImage": os_image,
                "systemUUID": uid("system", name),
            },
        },
    }


def _condition(kind: str, status: str, reason: str, message: str) -> dict[str, str]:
    return {
        "type": kind,
        "status": status,
        "lastHeartbeatTime": HEARTBEAT,
        "lastTransitionTime": CREATED,
        "reason": reason,
        "message": message,
    }


def _pod(
    name: str,
    namespace: str,
    node_name: str,
    phase: str,
    labels: dict[str, str],
    spec: dict[str, Any],
    owner: dict[str, Any] | None = None,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": uid("pod", namespace, name),
        "resourceVersion": _version("pod", namespace, name),
        "creationTimestamp": CREATED,
        "labels": labels,
    }
    if owner:
        metadata["ownerReferences"] = [owner]
    spec = {
        "nodeName": node_name,
        "restartPolicy": "Always",
        "dnsPolicy": "ClusterFirst",
        "schedulerName": "default-scheduler",
        "serviceAccountName": "default",
        "terminationGracePeriodSeconds": 30,
        "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
        "priority": 0,
        **spec,
    }
    status: dict[str, Any] = {"phase": phase, "qosClass": "Burstable"}
    if phase != "Pending":
        status.update(hostIP="10.0.0.1", podIP=f"10.244.0.{int(uid(name)[:2], 16) % 250 + 2}", startTime=CREATED)
    ready = "True" if phase == "Running" else "False"
    status["conditions"] = [
        {"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": CREATED},
        {"type": "Ready", "status": ready, "lastProbeTime": None, "lastTransitionTime": CREATED},
    ]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": status}


def kata_pod(name: str, node_name: str, runtime_class: dict[str, Any], phase: str = "Running") -> dict[str, Any]:
    """A Kata confidential container: the RuntimeClass admission controller copied ``overhead.podFixed``."""
    spec = {
        "runtimeClassName": runtime_class["metadata"]["name"],
        "overhead": dict(runtime_class["overhead"]["podFixed"]),
        "containers": [
            {
                "name": "app",
                "image": "registry.example.com/confidential/app:1.4.2",
                "imagePullPolicy": "IfNotPresent",
                "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "1Gi"}},
            }
        ],
    }
    return _pod(name, "confidential", node_name, phase, {"app": name.rsplit("-", 1)[0]}, spec)


def virt_launcher_pod(vm: str, node_name: str, device: str, phase: str = "Running") -> dict[str, Any]:
    """KubeVirt's virt-launcher pod of a VMI, with the devices the VMI's confidential setup requests."""
    devices = dict.fromkeys(KUBEVIRT_GENERIC_DEVICES, "1")
    devices[device] = "1"
    owner = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "name": vm,
        "uid": uid("vmi", vm),
        "controller": True,
        "blockOwnerDeletion": True,
    }
    spec = {
        "containers": [
            {
                "name": "compute",
                "image": "quay.io/kubevirt/virt-launcher:v1.6.2",
                "resources": {"requests": {"cpu": "200m", "memory": "4362Mi", **devices}, "limits": dict(devices)},
            }
        ],
        "terminationGracePeriodSeconds": 210,
    }
    labels = {"kubevirt.io": "virt-launcher", "kubevirt.io/created-by": uid("vmi", vm), "vm.kubevirt.io/name": vm}
    return _pod(f"virt-launcher-{vm}-{uid(vm)[:5]}", "vms", node_name, phase, labels, spec, owner)


def runtime_class(name: str, handler: str, extended: dict[str, str], selector: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {
            "name": name,
            "uid": uid("runtimeclass", name),
            "resourceVersion": _version("runtimeclass", name),
            "creationTimestamp": CREATED,
        },
        "handler": handler,
        "overhead": {"podFixed": {"cpu": "250m", "memory": "350Mi", **extended}},
        "scheduling": {"nodeSelector": selector},
    }


def node_feature_rule(name: str, rules: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "nfd.k8s-sigs.io/v1alpha1",
        "kind": "NodeFeatureRule",
        "metadata": {
            "name": name,
            "uid": uid("nfr", name),
            "resourceVersion": _version("nfr", name),
            "generation": 1,
            "creationTimestamp": CREATED,
        },
        "spec": {"rules": rules},
    }
