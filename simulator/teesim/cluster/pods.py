"""Pods and RuntimeClasses as the scheduler and the kubelet see them.

Models the parts of a pod spec that decide TEE-key accounting: container requests of extended
resources, ``spec.overhead`` copied from the RuntimeClass's ``overhead.podFixed`` (the RuntimeClass
admission controller does this), the guest the pod launches and the misc resource that guest charges.
Simplifications: one container per pod (KubeVirt's ``compute`` container or a Kata workload), no CPU
or memory, no restarts of a failed pod.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class Phase(StrEnum):
    PENDING = "Pending"  # not bound to a node yet
    BOUND = "Bound"  # bound, kubelet admitting or guest starting (keys requested, not yet charged)
    RUNNING = "Running"  # guest charged in the kernel
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class Consumer(StrEnum):
    KATA = "kata"
    KUBEVIRT = "kubevirt"
    EXTERNAL = "external"


@dataclass(frozen=True)
class RuntimeClass:
    name: str
    overhead: dict[str, int]


# The RuntimeClasses the confidential-containers operator installs (overhead.podFixed).
RUNTIME_CLASSES: dict[str, RuntimeClass] = {
    "kata-qemu-tdx": RuntimeClass("kata-qemu-tdx", {"tdx.intel.com/keys": 1}),
    "kata-qemu-snp": RuntimeClass("kata-qemu-snp", {"sev-snp.amd.com/esids": 1}),
}
# Which RuntimeClass a Kata guest of each misc resource uses.
KATA_RUNTIME_CLASS: dict[str, str] = {"tdx": "kata-qemu-tdx", "sev_es": "kata-qemu-snp"}


@dataclass
class Pod:
    """One pod and the guest inside it."""

    uid: str
    consumer: Consumer
    misc_resource: str
    created: float
    launch_delay: float
    duration: float
    requests: dict[str, int] = field(default_factory=dict)
    overhead: dict[str, int] = field(default_factory=dict)
    runtime_class: str | None = None
    # Which requests a device plugin serves (need an Allocate at admission).
    namespace: str = "default"
    phase: Phase = Phase.PENDING
    node: str | None = None
    bound_at: float | None = None
    started_at: float | None = None
    ended_at: float | None = None
    reason: str = ""

    @property
    def name(self) -> str:
        return self.uid

    @property
    def container(self) -> str:
        return "compute" if self.consumer is Consumer.KUBEVIRT else "workload"

    def need(self) -> dict[str, int]:
        """What the scheduler counts: container requests plus ``spec.overhead``."""
        total = dict(self.requests)
        for name, value in self.overhead.items():
            total[name] = total.get(name, 0) + value
        return total

    @property
    def holds_resources(self) -> bool:
        """Bound or running pods count against node allocatable."""
        return self.phase in (Phase.BOUND, Phase.RUNNING)

    @property
    def cgroup(self) -> str:
        return f"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{self.uid}.slice"


def kata_pod(uid: str, misc_resource: str, created: float, launch_delay: float, duration: float) -> Pod:
    """A Kata confidential pod: no extended requests, keys only through RuntimeClass overhead."""
    try:
        runtime = RUNTIME_CLASSES[KATA_RUNTIME_CLASS[misc_resource]]
    except KeyError:
        raise ValueError(
            f"no Kata RuntimeClass charges {misc_resource!r}; Kata guests use {', '.join(KATA_RUNTIME_CLASS)}"
        ) from None
    return Pod(
        uid=uid,
        consumer=Consumer.KATA,
        misc_resource=misc_resource,
        created=created,
        launch_delay=launch_delay,
        duration=duration,
        overhead=dict(runtime.overhead),
        runtime_class=runtime.name,
    )


def vmi_pod(
    uid: str, misc_resource: str, resource_name: str, created: float, launch_delay: float, duration: float
) -> Pod:
    """A KubeVirt virt-launcher pod whose ``compute`` container requests one key of ``resource_name``."""
    return Pod(
        uid=uid,
        consumer=Consumer.KUBEVIRT,
        misc_resource=misc_resource,
        created=created,
        launch_delay=launch_delay,
        duration=duration,
        requests={resource_name: 1},
    )
