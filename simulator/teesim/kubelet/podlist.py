"""The pods bound to this node, as the kubelet's ``GET /pods`` endpoint lists them.

The real kubelet serves the pods it runs as a ``v1.PodList`` on its HTTP port (``/pods``, the
read-only port 10255 where it is still enabled, or the authenticated 10250). An advertiser that
must account for keys consumed through RuntimeClass overhead needs exactly this view: overhead
never reaches the device manager, so pod-resources never shows it, but every bound pod carries
``spec.overhead`` (copied from its RuntimeClass at admission by the API server). A production
plugin would use a pod informer filtered on ``spec.nodeName``; a list of the same objects is what it
would cache.

:class:`PodRegistry` holds the objects; :class:`PodListServer` serves them over HTTP on
``127.0.0.1`` (an ephemeral port by default). Only the fields the simulator needs are filled in:
``metadata.{name,namespace,uid}``, ``spec.{nodeName,runtimeClassName,overhead,containers[].
{name,resources.requests,resources.limits}}`` and ``status.phase``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from teesim.kubelet.devicemanager import PodRef

RUNNING = "Running"
SUCCEEDED = "Succeeded"


@dataclass
class PodObject:
    """One pod as the API server stores it (the parts that decide TEE-key accounting)."""

    ref: PodRef
    containers: dict[str, dict[str, int]] = field(default_factory=dict)
    overhead: dict[str, int] = field(default_factory=dict)
    runtime_class: str | None = None
    phase: str = RUNNING
    sandbox_ready: bool = True

    def to_json(self, node_name: str) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "nodeName": node_name,
            "containers": [
                {"name": name, "resources": {"requests": _quantities(req), "limits": _quantities(req)}}
                for name, req in self.containers.items()
            ],
        }
        if self.runtime_class:
            spec["runtimeClassName"] = self.runtime_class
        if self.overhead:
            spec["overhead"] = _quantities(self.overhead)
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": self.ref.name, "namespace": self.ref.namespace, "uid": self.ref.key},
            "spec": spec,
            "status": {
                "phase": self.phase,
                "conditions": [{"type": "PodReadyToStartContainers", "status": str(self.sandbox_ready)}],
            },
        }


def _quantities(values: Mapping[str, int]) -> dict[str, str]:
    return {name: str(amount) for name, amount in sorted(values.items())}


class PodRegistry:
    """The pod objects bound to one node. Callers hold the kubelet's lock."""

    def __init__(self, node_name: str = "teesim-node"):
        self.node_name = node_name
        self._pods: dict[str, PodObject] = {}

    def upsert(self, ref: PodRef) -> PodObject:
        pod = self._pods.get(ref.key)
        if pod is None:
            pod = self._pods[ref.key] = PodObject(ref)
        return pod

    def get(self, ref: PodRef) -> PodObject | None:
        return self._pods.get(ref.key)

    def find(self, namespace: str, name: str) -> PodObject | None:
        """``GetPodByName``: the pod bound to this node with that namespace and name, finished or not,
        until the API server deletes it."""
        for pod in self._pods.values():
            if pod.ref.namespace == namespace and pod.ref.name == name:
                return pod
        return None

    def delete(self, ref: PodRef) -> None:
        self._pods.pop(ref.key, None)

    def finish(self, ref: PodRef) -> None:
        pod = self._pods.get(ref.key)
        if pod is not None:
            pod.phase = SUCCEEDED
            pod.sandbox_ready = False

    def pod_list(self) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "PodList",
            "metadata": {},
            "items": [p.to_json(self.node_name) for _, p in sorted(self._pods.items())],
        }


class PodListServer:
    """Serves ``GET /pods`` from a :class:`PodRegistry` (read under ``lock``)."""

    def __init__(self, snapshot: Callable[[], dict[str, Any]], host: str = "127.0.0.1", port: int = 0):
        handler = _handler(snapshot)
        self._server = ThreadingHTTPServer((host, port), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="kubelet-pods", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/pods"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def _handler(snapshot: Callable[[], dict[str, Any]]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] != "/pods":
                self.send_error(404, "only /pods is served")
                return
            body = json.dumps(snapshot()).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return  # no access log on stderr

    return Handler
