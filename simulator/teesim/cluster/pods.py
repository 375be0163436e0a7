"""Pods and RuntimeClasses as the scheduler and the kubelet see them.

Models the parts of a pod spec that decide TEE-key accounting: container requests of extended
resources, ``spec.overhead`` copied from the RuntimeClass's ``overhead.podFixed`` (the RuntimeClass
admission controller does this), the guest the pod launches and the misc resource that guest charges
(TDX guests ``tdx``, plain SEV ``sev``, SEV-ES *and* SNP ``sev_es``).
CPU (millicores, ``cpu``) and memory (MiB, ``memory``) are requested too, because the default
scheduler scores nodes by them (:mod:`teesim.cluster.scheduler`): a Kata pod's RuntimeClass adds
1 CPU and 2048Mi of overhead (kata-deploy chart 4.1.0 ``runtimeclasses.yaml``, ``qemu-tdx``/``qemu-snp``)
to its container's 1 CPU and 2048Mi; a VMI's ``compute`` container requests 200m (2 vCPUs at
KubeVirt's default ``cpuAllocationRatio`` 10) and 4096Mi of guest memory plus 250Mi of launcher
overhead. Those workload sizes are the model's assumption, not an upstream default.
Simplifications: one container per pod (KubeVirt's ``compute`` container or a Kata workload). A Kata
pod whose sandbox fails is retried by the kubelet, a VMI by virt-handler (``attempts`` counts the tries).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from teesim._collection import NFD_SNP_ESIDS, NFD_TDX_KEYS


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


class Guest(StrEnum):
    """The kind of confidential guest; decides the misc resource KVM charges."""

    TDX = "tdx"
    SEV = "sev"
    SEV_ES = "sev-es"
    SNP = "snp"

    @property
    def misc_resource(self) -> str:
        # A module-level table: building a dict and reading Enum.value per call showed in the profile
        # (every launch, bind and stop asks).
        return _GUEST_MISC_RESOURCE[self]

    @classmethod
    def default_for(cls, misc_resource: str) -> Guest:
        """``tdx`` -> TDX, ``sev`` -> SEV, ``sev_es`` -> SNP (the guest everyone targets today)."""
        return {"tdx": cls.TDX, "sev": cls.SEV, "sev_es": cls.SNP}[misc_resource]


_GUEST_MISC_RESOURCE: dict[Guest, str] = {
    Guest.TDX: "tdx",
    Guest.SEV: "sev",
    Guest.SEV_ES: "sev_es",
    Guest.SNP: "sev_es",
}
# Enum.value is a property (a descriptor call per read): the hot paths (every launch attempt, failure
# and stop) read the values from these tables instead.
CONSUMER_VALUE: dict[Consumer, str] = {c: c.value for c in Consumer}
GUEST_VALUE: dict[Guest, str] = {g: g.value for g in Guest}


@dataclass(frozen=True)
class RuntimeClass:
    name: str
    overhead: dict[str, int]


# The RuntimeClasses kata-deploy installs, with the key it adds to overhead.podFixed when NFD is
# deployed (tools/packaging/kata-deploy/binary/src/k8s/runtimeclasses.rs). Strategies may point the
# overhead elsewhere; this is the default.
RUNTIME_CLASSES: dict[str, RuntimeClass] = {
    "kata-qemu-tdx": RuntimeClass("kata-qemu-tdx", {NFD_TDX_KEYS: 1}),
    "kata-qemu-snp": RuntimeClass("kata-qemu-snp", {NFD_SNP_ESIDS: 1}),
}
# CPU (millicores) and memory (MiB): see the module docstring for where each comes from.
KATA_CONTAINER_REQUESTS: dict[str, int] = {"cpu": 1000, "memory": 2048}
KATA_COMPUTE_OVERHEAD: dict[str, int] = {"cpu": 1000, "memory": 2048}
VMI_COMPUTE_REQUESTS: dict[str, int] = {"cpu": 200, "memory": 4096 + 250}

# Which RuntimeClass a Kata guest of each misc resource uses.
KATA_RUNTIME_CLASS: dict[str, str] = {"tdx": "kata-qemu-tdx", "sev_es": "kata-qemu-snp"}


@dataclass
class Pod:
    """One pod and the guest inside it."""

    uid: str
    consumer: Consumer
    guest: Guest
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
    attempts: int = 0  # launches tried (a Kata sandbox is retried by the kubelet)
    first_launch_at: float | None = None
    # Whether the first failed launch fell in the race window (its retries share the verdict).
    in_race_window: bool | None = None
    # What the scheduler counted for this pod when it bound it (requests + overhead, DRA-adjusted).
    scheduled_need: dict[str, int] = field(default_factory=dict)
    # DRA devices the scheduler allocated to this pod, per extended resource name.
    dra_devices: dict[str, list[str]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.uid

    @property
    def misc_resource(self) -> str:
        return self.guest.misc_resource

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


def kata_pod(
    uid: str,
    guest: Guest,
    created: float,
    launch_delay: float,
    duration: float,
    overhead: dict[str, int] | None = None,
) -> Pod:
    """A Kata confidential pod: no extended requests, keys only through RuntimeClass overhead
    (``overhead`` replaces the default RuntimeClass's; ``{}`` means Kata without NFD: no key)."""
    try:
        runtime = RUNTIME_CLASSES[KATA_RUNTIME_CLASS[guest.misc_resource]]
    except KeyError:
        raise ValueError(f"no Kata RuntimeClass runs {guest.value!r} guests; Kata guests are TDX or SNP") from None
    if guest is Guest.SEV_ES:
        raise ValueError("Kata confidential guests on AMD are SNP, not SEV-ES")
    return Pod(
        uid=uid,
        consumer=Consumer.KATA,
        guest=guest,
        created=created,
        launch_delay=launch_delay,
        duration=duration,
        requests=dict(KATA_CONTAINER_REQUESTS),
        overhead={**KATA_COMPUTE_OVERHEAD, **(runtime.overhead if overhead is None else overhead)},
        runtime_class=runtime.name,
    )


def vmi_pod(
    uid: str, guest: Guest, requests: dict[str, int], created: float, launch_delay: float, duration: float
) -> Pod:
    """A KubeVirt virt-launcher pod whose ``compute`` container requests ``requests``."""
    return Pod(
        uid=uid,
        consumer=Consumer.KUBEVIRT,
        guest=guest,
        created=created,
        launch_delay=launch_delay,
        duration=duration,
        requests={**VMI_COMPUTE_REQUESTS, **requests},
    )
