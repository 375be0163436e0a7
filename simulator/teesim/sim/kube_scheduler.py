"""The real kube-scheduler as teesim's scheduler: a placer (:mod:`teesim.cluster.queue`) over an API server.

teesim keeps its pending queue and everything on the nodes (the kubelet model admits, starts and charges
``misc.current``); each scheduling decision goes to a kube-scheduler watching a real kube-apiserver:

* every simulated node is a Node object whose status is what its kubelet and nfd-master would write: the
  device plugins' devices as the kubelet reports them (capacity = healthy + unhealthy, allocatable =
  healthy, as last synced: ``SimNode.status_devices``), NFD's extended resources in both capacity and
  allocatable (nfd-master patches both), the node's CPU and memory, and ``pods`` 110 (the kubelet's
  ``maxPods`` default). It is written before each decision whenever it changed;
* a Kata pod is a Pod with the RuntimeClass of its guest, whose ``overhead.podFixed`` is the strategy's
  (the API server's RuntimeClass admission copies it into ``spec.overhead``; the placer checks it did); a
  VMI is a virt-launcher Pod whose ``compute`` container requests the VMI's resources;
* the pod is created when teesim's queue asks about it, and the scheduler binds it (``spec.nodeName``) or
  marks it ``Unschedulable``. An unschedulable pod is deleted again and created afresh when the queue asks
  next (after a node changed), so that pods are decided in teesim's order (creation order) and never by the
  scheduler's own retry timing: kube-scheduler v1.37.2 orders retries by wall-clock back-off windows
  (``pkg/scheduler/backend/queue/backoff_queue.go``, ``scheduling_queue.go``), which no seed reproduces;
* a pod teesim's kubelet model released (its guest ended, or the kubelet rejected it) is deleted (grace 0).

The scheduler's informers see Nodes and Pods on two watches, in no order between them. So that a decision
is taken on the node status written before it, every status write is followed by a label
(``teesim.dev/status-generation``) on the nodes, and each pod selects the current value: a pod the scheduler
tried on an older node object fails on NodeAffinity, and the placer waits for the retry the node's update
triggers.

Every decision is also put to teesim's model (:func:`teesim.cluster.scheduler.choose_node`) on the same
views, and :attr:`KubeScheduler.decisions` keeps both answers.
"""

from __future__ import annotations

import base64
import binascii
import http.client
import json
import ssl
import tempfile
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from teesim.cluster.pods import Consumer, Pod
from teesim.cluster.scheduler import NodeView, choose_node
from teesim.fixtures import k8s_objects
from teesim.sim.simulation import Simulation

SYNC_LABEL = "teesim.dev/status-generation"
RUN_LABEL = "teesim.dev/run"
SIMULATED_LABEL = "teesim.dev/simulated"  # on the Nodes teesim made (the only ones it replaces)
MAX_PODS = 110  # the kubelet's maxPods default
IMAGE = "teesim.invalid/guest:none"  # never pulled: no kubelet runs these pods
STALE = "node affinity/selector"  # the NodeAffinity filter's reason: the scheduler's node object was older


class ApiError(OSError):
    """A refusal by the API server (an I/O failure to the command line, which reports those without a traceback)."""

    def __init__(self, status: int, message: str):
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


class ApiClient:
    """JSON over one kept-alive TLS connection to a kube-apiserver (client certificate or bearer token)."""

    def __init__(self, server: str, context: ssl.SSLContext, token: str | None = None, timeout: float = 30):
        url = urllib.parse.urlsplit(server)
        self.host, self.port = url.hostname or "localhost", url.port or 443
        self.context, self.token, self.timeout = context, token, timeout
        self._connection: http.client.HTTPSConnection | None = None
        self.calls = 0

    @classmethod
    def from_kubeconfig(cls, path: Path, context_name: str | None = None) -> ApiClient:
        try:
            return cls._from_kubeconfig(path, context_name)
        except (yaml.YAMLError, KeyError, TypeError, AttributeError, binascii.Error) as exc:
            raise ValueError(f"{path}: not a usable kubeconfig ({type(exc).__name__}: {exc})") from None

    @classmethod
    def _from_kubeconfig(cls, path: Path, context_name: str | None) -> ApiClient:
        config = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        name = context_name or config.get("current-context")
        context = _named(config, "contexts", name, path)["context"]
        cluster = _named(config, "clusters", context["cluster"], path)["cluster"]
        user = _named(config, "users", context["user"], path)["user"]
        tls = ssl.create_default_context(cadata=_pem(cluster, "certificate-authority", path).decode())
        if "client-certificate-data" in user or "client-certificate" in user:
            with tempfile.TemporaryDirectory(prefix="teesim-kube-") as tmp:
                cert, key = Path(tmp) / "client.crt", Path(tmp) / "client.key"
                cert.write_bytes(_pem(user, "client-certificate", path))
                key.touch(mode=0o600)
                key.write_bytes(_pem(user, "client-key", path))
                tls.load_cert_chain(str(cert), str(key))
        return cls(cluster["server"], tls, user.get("token"))

    def _conn(self) -> http.client.HTTPSConnection:
        if self._connection is None:
            self._connection = http.client.HTTPSConnection(
                self.host, self.port, context=self.context, timeout=self.timeout
            )
        return self._connection

    def call(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Any:
        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        data = None if body is None else json.dumps(body).encode()
        if data is not None:
            headers["Content-Type"] = content_type
        for attempt in (1, 2):  # a kept-alive connection the server closed is reopened once
            try:
                self._conn().request(method, path, data, headers)
                reply = self._conn().getresponse()
                payload = reply.read()
                break
            except (http.client.HTTPException, ConnectionError):
                self.close()
                if attempt == 2:
                    raise
        self.calls += 1
        if reply.status >= 300:
            try:
                message = json.loads(payload).get("message", payload.decode(errors="replace"))
            except ValueError:
                message = payload.decode(errors="replace")
            raise ApiError(reply.status, f"{method} {path}: {message}")
        return json.loads(payload) if payload else None

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None


def _named(config: dict, section: str, name: str | None, path: Path) -> dict:
    for entry in config.get(section) or []:
        if entry.get("name") == name:
            return entry
    raise ValueError(f"{path}: no {section[:-1]} named {name!r}")


def _pem(section: dict, key: str, path: Path) -> bytes:
    if f"{key}-data" in section:
        return base64.b64decode(section[f"{key}-data"])
    if key in section:
        return (Path(path).parent / section[key]).read_bytes()
    raise ValueError(f"{path}: no {key} or {key}-data")


@dataclass(frozen=True)
class Decision:
    """One pod put to both schedulers at virtual time ``time``."""

    time: float
    pod: str
    need: dict[str, int]
    scheduler: str | None  # the node kube-scheduler bound it to, or None (Unschedulable)
    model: str | None  # the node teesim's model picks on the same views
    message: str  # the scheduler's Unschedulable message ("" when bound)


# teesim's units: CPU in millicores, memory in MiB, everything else a count.
UNITS = {"cpu": "m", "memory": "Mi"}
_SUFFIXES = {
    "m": 1e-3,
    "": 1,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
}


def quantities(amounts: Mapping[str, int]) -> dict[str, str]:
    """teesim's amounts as Kubernetes quantities."""
    return {name: f"{amount}{UNITS.get(name, '')}" for name, amount in sorted(amounts.items())}


def amounts(values: Mapping[str, str] | None) -> dict[str, int]:
    """Kubernetes quantities (as the API server writes them: ``1``, ``2Gi``) in teesim's units."""
    out = {}
    for name, text in (values or {}).items():
        number = text.rstrip("kKMGTim")
        value = float(number) * _SUFFIXES[text[len(number) :]]
        out[name] = round(value * {"cpu": 1000, "memory": 2**-20}.get(name, 1))
    return out


@dataclass
class KubeScheduler:
    """The placer for a :class:`Simulation` (``placer=KubeScheduler(...).place``); :meth:`attach` before the
    run, :meth:`close` after it. ``namespace`` holds this run's pods (made here, emptied by ``close``)."""

    api: ApiClient
    namespace: str
    timeout: float = 60.0
    decisions: list[Decision] = field(default_factory=list)
    overhead_mismatches: list[str] = field(default_factory=list)
    stale_retries: int = 0
    wall_s: float = 0.0
    _sim: Simulation | None = None
    _status: dict[str, dict[str, dict[str, str]]] = field(default_factory=dict)
    _generation: int = 0
    _calls_before: int = 0
    _bound: dict[str, tuple[str, str]] = field(default_factory=dict)  # teesim uid -> (API name, node)
    _runtime_classes: dict[str, str] = field(default_factory=dict)  # teesim name -> cluster name

    # -- set-up ---------------------------------------------------------------------------------------
    def attach(self, sim: Simulation) -> None:
        """Make the run's objects: its namespace (and the ``default`` ServiceAccount a controller-manager would
        make), the strategy's RuntimeClasses, and every node afresh (pods of earlier runs deleted first)."""
        dra = sim.strategy.dra_names()
        if dra:
            raise ValueError(
                f"strategy {sim.strategy.name}: the kube-scheduler mode writes no ResourceSlices or DeviceClasses"
            )
        self._sim = sim
        self._calls_before = self.api.calls
        started = time.perf_counter()
        self._delete_run_pods(all_namespaces=True)
        self._ensure({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.namespace}})
        account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}}
        self._ensure(account, f"/api/v1/namespaces/{self.namespace}/serviceaccounts")
        for node in sim.nodes.values():
            self._recreate_node(node.name)
        self.wall_s += time.perf_counter() - started

    def _ensure(self, obj: dict, collection: str | None = None) -> None:
        try:
            self.api.call("POST", collection or "/api/v1/namespaces", obj)
        except ApiError as exc:
            if exc.status != 409:
                raise

    def _recreate_node(self, name: str) -> None:
        """The node afresh; refuses to replace a Node teesim did not make (a real cluster's)."""
        try:
            found = self.api.call("GET", f"/api/v1/nodes/{name}")
        except ApiError as exc:
            if exc.status != 404:
                raise
        else:
            if SIMULATED_LABEL not in (found["metadata"].get("labels") or {}):
                raise ValueError(
                    f"Node {name} exists and teesim did not make it: the kube-scheduler mode replaces the scenario's "
                    "nodes, so run it on a private control plane (scripts/kube_control_plane.py up --scheduler)"
                )
            self.api.call("DELETE", f"/api/v1/nodes/{name}")
        node = k8s_objects.node(name, "10.0.0.10", {}, {}, "6.16.0", "Debian GNU/Linux 13 (trixie)")
        metadata = {"name": name, "labels": {**node["metadata"]["labels"], SIMULATED_LABEL: "true"}}
        self.api.call("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": metadata})
        status = {k: v for k, v in node["status"].items() if k not in ("capacity", "allocatable")}
        self.api.call("PATCH", f"/api/v1/nodes/{name}/status", {"status": status}, "application/merge-patch+json")
        # The API server's TaintNodesByCondition admission taints a new Node not-ready (NoSchedule); the node
        # lifecycle controller lifts it once the kubelet reports Ready. No controller-manager runs: lift it here.
        untaint = {"spec": {"taints": None}}
        self.api.call("PATCH", f"/api/v1/nodes/{name}", untaint, "application/merge-patch+json")
        self._status.pop(name, None)

    def _runtime_class(self, pod: Pod) -> str:
        """The cluster's RuntimeClass for ``pod``: its teesim name, suffixed with the strategy (the overhead
        differs between strategies, and admission reads RuntimeClasses from an informer)."""
        assert self._sim is not None and pod.runtime_class is not None
        name = f"{pod.runtime_class}.{self._sim.strategy.name}"
        if self._runtime_classes.get(pod.runtime_class) != name:
            body = {
                "apiVersion": "node.k8s.io/v1",
                "kind": "RuntimeClass",
                "metadata": {"name": name},
                "handler": pod.runtime_class,
                "overhead": {"podFixed": quantities(pod.overhead)},
            }
            try:
                self.api.call("POST", "/apis/node.k8s.io/v1/runtimeclasses", body)
            except ApiError as exc:
                if exc.status != 409:
                    raise
                found = self.api.call("GET", f"/apis/node.k8s.io/v1/runtimeclasses/{name}")
                overhead = amounts((found.get("overhead") or {}).get("podFixed"))
                if overhead != pod.overhead or found.get("handler") != body["handler"]:
                    raise ValueError(
                        f"RuntimeClass {name} exists with another handler or overhead ({found.get('overhead')}); "
                        "delete it or use another cluster"
                    ) from None
            self._runtime_classes[pod.runtime_class] = name
        return name

    # -- the placer -----------------------------------------------------------------------------------
    def place(self, pod: Pod, need: dict[str, int], views: list[NodeView]) -> str | None:
        assert self._sim is not None, "attach() first"
        started = time.perf_counter()
        self._sync_released()
        self._sync_status()
        node, message = self._decide(pod)
        self.decisions.append(
            Decision(self._sim.clock.now, pod.uid, dict(need), node, choose_node(need, views), message)
        )
        self.wall_s += time.perf_counter() - started
        return node

    def _sync_status(self) -> None:
        """Write every node's status that changed since the last write, then move the generation label."""
        assert self._sim is not None
        now, changed = self._sim.clock.now, []
        for node in self._sim.nodes.values():
            allocatable = dict(node.status_allocatable())
            capacity = dict(allocatable)
            for resource, count in node.devices.capacity(now).items():
                if resource in node.status_devices:
                    capacity[resource] = max(count, node.status_devices[resource])
            status = {
                "capacity": quantities({**capacity, "pods": MAX_PODS}),
                "allocatable": quantities({**allocatable, "pods": MAX_PODS}),
            }
            before = self._status.get(node.name, {"capacity": {}, "allocatable": {}})
            if status == before:
                continue
            patch = {part: {**dict.fromkeys(before[part]), **status[part]} for part in status}
            self.api.call(
                "PATCH", f"/api/v1/nodes/{node.name}/status", {"status": patch}, "application/merge-patch+json"
            )
            self._status[node.name] = status
            changed.append(node.name)
        if changed or not self._generation:
            self._generation += 1
            label = {"metadata": {"labels": {SYNC_LABEL: str(self._generation)}}}
            for name in self._sim.nodes:
                self.api.call("PATCH", f"/api/v1/nodes/{name}", label, "application/merge-patch+json")

    def _sync_released(self) -> None:
        """Delete the pods teesim's kubelet model released since the last decision."""
        assert self._sim is not None
        for uid, (name, node) in list(self._bound.items()):
            if uid not in self._sim.nodes[node].bound:
                self._delete(name)
                del self._bound[uid]

    def _delete(self, name: str) -> None:
        try:
            self.api.call("DELETE", f"{self._pods}/{name}", {"kind": "DeleteOptions", "gracePeriodSeconds": 0})
        except ApiError as exc:
            if exc.status != 404:
                raise

    @property
    def _pods(self) -> str:
        return f"/api/v1/namespaces/{self.namespace}/pods"

    def _decide(self, pod: Pod) -> tuple[str | None, str]:
        """Create ``pod`` and wait for kube-scheduler's answer: (node or None, its Unschedulable message)."""
        body = self.pod_object(pod)
        name = body["metadata"]["name"]
        created = self._create(body)
        added = amounts(created["spec"].get("overhead"))
        if added != (pod.overhead if pod.runtime_class else {}):
            self.overhead_mismatches.append(f"{name}: admission added {added}, teesim's pod has {pod.overhead}")
        deadline = time.monotonic() + self.timeout
        delay = 0.002
        while time.monotonic() < deadline:
            current = self.api.call("GET", f"{self._pods}/{name}")
            node = current["spec"].get("nodeName")
            if node:
                self._bound[pod.uid] = (name, node)
                return node, ""
            message = _unschedulable(current)
            if message is not None and STALE not in message:
                self._delete(name)
                return None, message
            if message is not None and delay < 0.05:
                self.stale_retries += 1
                delay = 0.05  # the retry waits for the node's update to reach the scheduler
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
        raise TimeoutError(f"kube-scheduler did not decide on pod {self.namespace}/{name} in {self.timeout:.0f} s")

    def _create(self, body: dict) -> dict:
        for attempt in range(50):
            try:
                return self.api.call("POST", self._pods, body)
            except ApiError as exc:
                # Admission reads RuntimeClasses from an informer: one just made may not be there yet.
                if exc.status not in (403, 404) or "RuntimeClass" not in str(exc) or attempt == 49:
                    raise
                time.sleep(0.05)
        raise AssertionError("unreachable")

    def pod_object(self, pod: Pod) -> dict[str, Any]:
        """The Pod teesim's pod is on the API server: a Kata pod with its RuntimeClass, or a virt-launcher."""
        kata = pod.consumer is Consumer.KATA
        name = pod.uid if kata else f"virt-launcher-{pod.uid}"
        requests = quantities(pod.requests)
        # Extended resources are requested with limits equal to requests (the API server requires both).
        limits = {k: v for k, v in requests.items() if "/" in k}
        labels = {RUN_LABEL: self.namespace, "teesim.dev/consumer": pod.consumer.value}
        if not kata:
            labels.update({"kubevirt.io": "virt-launcher", "vm.kubevirt.io/name": pod.uid})
        spec: dict[str, Any] = {
            "containers": [
                {"name": pod.container, "image": IMAGE, "resources": {"requests": requests, "limits": limits}}
            ],
            "nodeSelector": {SYNC_LABEL: str(self._generation)},
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 0,
        }
        if kata:
            spec["runtimeClassName"] = self._runtime_class(pod)
        metadata = {"name": name, "labels": labels}
        return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}

    # -- the end --------------------------------------------------------------------------------------
    def close(self) -> None:
        """Delete this run's pods (the namespace stays: no namespace controller runs to finish a deletion)."""
        self._delete_run_pods()
        self._bound.clear()
        self.api.close()

    def _delete_run_pods(self, all_namespaces: bool = False) -> None:
        selector = urllib.parse.quote(RUN_LABEL if all_namespaces else f"{RUN_LABEL}={self.namespace}")
        listing = self.api.call("GET", f"/api/v1/pods?labelSelector={selector}")
        for item in listing["items"]:
            meta = item["metadata"]
            path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
            try:
                self.api.call("DELETE", path, {"kind": "DeleteOptions", "gracePeriodSeconds": 0})
            except ApiError as exc:
                if exc.status != 404:
                    raise

    def summary(self) -> dict[str, Any]:
        """How the two schedulers compared on this run's decisions."""
        fit = [d for d in self.decisions if (d.scheduler is None) != (d.model is None)]
        elsewhere = [d for d in self.decisions if d.scheduler and d.model and d.scheduler != d.model]
        return {
            "decisions": len(self.decisions),
            "bound": sum(1 for d in self.decisions if d.scheduler),
            "fit_disagreements": [d.__dict__ for d in fit],
            "other_node": len(elsewhere),
            # Each pod kube-scheduler left Unschedulable, with its message.
            "refused": [[d.pod, d.message] for d in self.decisions if d.scheduler is None],
            "overhead_mismatches": list(self.overhead_mismatches),
            "stale_retries": self.stale_retries,
            "api_calls": self.api.calls - self._calls_before,
            "wall_s": round(self.wall_s, 3),
        }


def placers_for(kubeconfig: Path, scenario: str, seed: int) -> Callable[[str], KubeScheduler]:
    """``teesim run --kube-scheduler``: a placer per strategy, each in its own namespace, on one connection."""
    api = ApiClient.from_kubeconfig(kubeconfig)

    def make(strategy: str) -> KubeScheduler:
        return KubeScheduler(api, scratch_namespace("teesim", scenario, f"s{seed}", strategy))

    return make


def _unschedulable(pod: dict) -> str | None:
    for condition in pod.get("status", {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("reason") == "Unschedulable":
            return str(condition.get("message", ""))
    return None


def scratch_namespace(*parts: object) -> str:
    """A namespace name from ``parts`` (lower-case, at most 63 characters)."""
    text = "-".join(str(p) for p in parts).lower()
    cleaned = "".join(c if c.isalnum() else "-" for c in text).strip("-")
    return cleaned[:63].rstrip("-") or "teesim"


__all__ = [
    "ApiClient",
    "ApiError",
    "Decision",
    "KubeScheduler",
    "amounts",
    "placers_for",
    "quantities",
    "scratch_namespace",
]
