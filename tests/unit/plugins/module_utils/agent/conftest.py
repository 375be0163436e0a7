"""A fake Kubernetes API server for the agent: real HTTPS on loopback, a Node, pods, events, and faults on demand."""

from __future__ import annotations

import base64
import http.server
import json
import ssl
import threading
import urllib.parse
from pathlib import Path

import pytest

TOKEN = "agent-token"


class FakeApi:
    """The state the handler serves and the faults it injects (``down``, ``pods_status``, ``drop_patch``)."""

    def __init__(self, node: str = "n1") -> None:
        self.node = {
            "metadata": {"name": node, "uid": "uid-" + node},
            "status": {
                "capacity": {"cpu": "8"},
                "allocatable": {"cpu": "8"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
        self.pods: list = []
        self.events: list = []
        self.patches: list = []
        self.requests: list = []
        self.down = False
        self.pods_status = 200
        self.patch_status = 200
        self.drop_patch = False
        self.lock = threading.Lock()

    def pool(self, resource: str = "tdx.intel.com/keys") -> tuple:
        status = self.node["status"]
        return status["capacity"].get(resource), status["allocatable"].get(resource)

    def condition(self) -> dict | None:
        found = [c for c in self.node["status"]["conditions"] if c["type"] == "ConfidentialTeeKeyPool"]
        return found[0] if found else None

    def apply(self, patch: dict) -> None:
        """Strategic merge of what the agent sends: maps merge, conditions merge by type."""
        status = self.node["status"]
        for key in ("capacity", "allocatable"):
            status[key].update(patch["status"].get(key, {}))
        for condition in patch["status"].get("conditions", []):
            status["conditions"] = [c for c in status["conditions"] if c["type"] != condition["type"]] + [condition]


def _handler(api: FakeApi):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _reply(self, status: int, body: object) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _body(self) -> dict:
            return json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")

        def _allowed(self) -> bool:
            if api.down:
                self.close_connection = True
                self.connection.close()
                return False
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                self._reply(401, {"message": "Unauthorized"})
                return False
            return True

        def do_GET(self):
            if not self._allowed():
                return
            url = urllib.parse.urlsplit(self.path)
            with api.lock:
                api.requests.append(("GET", url.path, url.query))
                if url.path == "/api/v1/pods":
                    if api.pods_status != 200:
                        return self._reply(api.pods_status, {"message": "pods is forbidden"})
                    wanted = urllib.parse.parse_qs(url.query)["fieldSelector"][0].split("=", 1)[1]
                    items = [p for p in api.pods if p["spec"].get("nodeName") == wanted]
                    return self._reply(200, {"kind": "PodList", "items": items})
                if url.path == "/api/v1/nodes/" + api.node["metadata"]["name"]:
                    return self._reply(200, api.node)
            self._reply(404, {"message": "not found"})

        def do_PATCH(self):
            if not self._allowed():
                return
            body = self._body()
            with api.lock:
                api.requests.append(("PATCH", self.path, self.headers.get("Content-Type")))
                if self.path != f"/api/v1/nodes/{api.node['metadata']['name']}/status":
                    return self._reply(404, {"message": "not found"})
                if api.patch_status != 200:
                    return self._reply(api.patch_status, {"message": "patch refused"})
                api.patches.append(body)
                api.apply(body)
                if api.drop_patch:  # applied, but the answer never arrives (the agent was killed, the link cut)
                    api.drop_patch = False
                    self.close_connection = True
                    self.connection.close()
                    return
                return self._reply(200, api.node)

        def do_POST(self):
            if not self._allowed():
                return
            body = self._body()
            with api.lock:
                api.events.append(body)
            self._reply(201, body)

        def log_message(self, *args):
            pass

    return Handler


@pytest.fixture
def fake_api(pki, tmp_path):
    """``(api, kubeconfig_path)``: a fake API server with TLS and a token, and a JSON kubeconfig for it."""
    api = FakeApi()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(api))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki["cert"], pki["key"])
    server.socket = context.wrap_socket(server.socket, server_side=True)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "test",
        "contexts": [{"name": "test", "context": {"cluster": "c", "user": "u"}}],
        "clusters": [
            {
                "name": "c",
                "cluster": {
                    "server": f"https://localhost:{server.server_address[1]}",
                    "certificate-authority-data": base64.b64encode(pki["ca_pem"].encode()).decode(),
                },
            }
        ],
        "users": [{"name": "u", "user": {"token": TOKEN}}],
    }
    path = tmp_path / "kubeconfig.json"
    path.write_text(json.dumps(config))
    yield api, path
    server.shutdown()
    server.server_close()


def host_tree(root: Path, capacity: str = "tdx 63\n", current: str | None = "tdx 0\n") -> Path:
    """A host root whose cgroup v2 root has the given misc files (``None``: no such file)."""
    cgroup = root / "sys" / "fs" / "cgroup"
    cgroup.mkdir(parents=True, exist_ok=True)
    for name, text in (("misc.capacity", capacity), ("misc.current", current)):
        target = cgroup / name
        if text is None:
            target.unlink(missing_ok=True)
        else:
            target.write_text(text)
    return root
