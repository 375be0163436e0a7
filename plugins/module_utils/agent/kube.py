# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""The node agent's Kubernetes client: standard library only (``http.client`` + ``ssl``), one kept-alive connection.

It does exactly what the agent needs, with the least privilege that needs: list the pods bound to its node (a field
selector, ``get/list pods``), read and patch its Node's status (``get nodes``, ``patch nodes/status``) and create
Events (``create events``). Credentials come from the pod's service account (``/var/run/secrets/kubernetes.io/
serviceaccount``, ``KUBERNETES_SERVICE_HOST``/``_PORT``, the token re-read as the kubelet rotates it) or from a
kubeconfig (its current context: server, CA, client certificate and key or a token; PyYAML when importable, else
the file must be JSON, which is YAML too).

The Node status is patched as a strategic merge patch: ``status.conditions`` merges by ``type`` there, so the
kubelet's own conditions stay (a JSON merge patch would replace the whole list).
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import ssl
import tempfile
import time
import urllib.parse

SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
STRATEGIC_MERGE = "application/strategic-merge-patch+json"
DEFAULT_TIMEOUT = 10.0


class KubeError(Exception):
    """A request failed: ``status`` is the HTTP status, 0 when the server could not be reached."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class KubeConfigError(KubeError):
    """The credentials cannot be loaded (a bad kubeconfig, no service account)."""


class Credentials:
    """Where the API server is and how to authenticate to it."""

    def __init__(
        self,
        server: str,
        context: ssl.SSLContext,
        token: str | None = None,
        token_file: str | None = None,
        source: str = "",
    ) -> None:
        self.server, self.context, self.token, self.token_file, self.source = server, context, token, token_file, source
        self._token_read = (0.0, token)

    def bearer(self) -> str | None:
        """The token; a token file is read again at most once a minute (projected tokens rotate)."""
        if not self.token_file:
            return self.token
        read_at, token = self._token_read
        if token is None or time.monotonic() - read_at > 60:
            try:
                with open(self.token_file, encoding="utf-8") as handle:
                    token = handle.read().strip()
            except OSError as exc:
                raise KubeConfigError(f"cannot read the token file {self.token_file}: {exc.strerror}") from None
            self._token_read = (time.monotonic(), token)
        return token


def in_cluster(root: str = SERVICE_ACCOUNT) -> Credentials:
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    if not host or not os.path.isfile(os.path.join(root, "token")):
        raise KubeConfigError(
            f"not in a pod (no KUBERNETES_SERVICE_HOST or no {root}/token): pass --kubeconfig PATH on a plain host"
        )
    context = ssl.create_default_context(cafile=os.path.join(root, "ca.crt"))
    server = f"https://{host}:{port}" if ":" not in host else f"https://[{host}]:{port}"
    return Credentials(server, context, token_file=os.path.join(root, "token"), source="in-cluster service account")


def _load_kubeconfig_text(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise KubeConfigError(f"kubeconfig {path}: {exc.strerror}") from None
    try:
        import yaml  # PyYAML where the host has it; JSON (a subset of YAML) otherwise

        loaded = yaml.safe_load(text)
    except ImportError:
        try:
            loaded = json.loads(text)
        except ValueError as exc:
            raise KubeConfigError(f"kubeconfig {path}: not JSON and PyYAML is not installed ({exc})") from None
    except yaml.YAMLError as exc:  # type: ignore[name-defined]
        raise KubeConfigError(f"kubeconfig {path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(loaded, dict):
        raise KubeConfigError(f"kubeconfig {path}: not a mapping")
    return loaded


def _named(config: dict, kind: str, name: str, path: str) -> dict:
    for entry in config.get(kind + "s") or ():
        if isinstance(entry, dict) and entry.get("name") == name:
            return entry.get(kind) or {}
    raise KubeConfigError(f"kubeconfig {path}: no {kind} named {name!r}")


def _data_or_file(entry: dict, key: str, base: str) -> tuple[bytes | None, str | None]:
    if entry.get(key + "-data"):
        return base64.b64decode(entry[key + "-data"]), None
    if entry.get(key):
        return None, os.path.join(base, entry[key])
    return None, None


def _client_cert(context: ssl.SSLContext, user: dict, base: str) -> None:
    cert_data, cert_file = _data_or_file(user, "client-certificate", base)
    key_data, key_file = _data_or_file(user, "client-key", base)
    if not (cert_data or cert_file):
        return
    with tempfile.TemporaryDirectory(prefix="tee-key-agent-") as private:  # mode 0700, removed at once
        if cert_data:
            cert_file = os.path.join(private, "cert")
            with open(cert_file, "wb") as handle:
                handle.write(cert_data)
        if key_data:
            key_file = os.path.join(private, "key")
            with open(os.open(key_file, os.O_WRONLY | os.O_CREAT, 0o600), "wb") as handle:
                handle.write(key_data)
        context.load_cert_chain(cert_file, key_file)


def from_kubeconfig(path: str) -> Credentials:
    """Credentials of the kubeconfig's current context."""
    config = _load_kubeconfig_text(path)
    base = os.path.dirname(os.path.abspath(path))
    name = config.get("current-context")
    if not name:
        raise KubeConfigError(f"kubeconfig {path}: no current-context")
    context_entry = _named(config, "context", name, path)
    cluster = _named(config, "cluster", str(context_entry.get("cluster")), path)
    user = _named(config, "user", str(context_entry.get("user")), path) if context_entry.get("user") else {}
    server = str(cluster.get("server") or "")
    if not server.startswith("https://"):
        raise KubeConfigError(f"kubeconfig {path}: cluster server {server!r} is not an https:// URL")
    ca_data, ca_file = _data_or_file(cluster, "certificate-authority", base)
    context = ssl.create_default_context(cafile=ca_file, cadata=ca_data.decode() if ca_data else None)
    if cluster.get("insecure-skip-tls-verify"):
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    try:
        _client_cert(context, user, base)
    except (OSError, ssl.SSLError) as exc:
        raise KubeConfigError(f"kubeconfig {path}: client certificate or key unusable: {exc}") from None
    token_file = os.path.join(base, user["tokenFile"]) if user.get("tokenFile") else None
    return Credentials(server, context, token=user.get("token"), token_file=token_file, source=f"kubeconfig {path}")


class KubeClient:
    """Requests over one kept-alive HTTPS connection, opened again after any failure."""

    def __init__(self, credentials: Credentials, timeout: float = DEFAULT_TIMEOUT, user_agent: str = "tee-key-agent"):
        self.credentials, self.timeout, self.user_agent = credentials, timeout, user_agent
        parsed = urllib.parse.urlsplit(credentials.server)
        self._host, self._port = parsed.hostname or "", parsed.port or 443
        self._prefix = parsed.path.rstrip("/")
        self._connection: http.client.HTTPSConnection | None = None

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def request(self, method: str, path: str, body: object = None, content_type: str = "application/json") -> dict:
        headers = {"Accept": "application/json", "User-Agent": self.user_agent}
        token = self.credentials.bearer()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        payload = None
        if body is not None:
            payload = json.dumps(body, separators=(",", ":")).encode()
            headers["Content-Type"] = content_type
        try:
            if self._connection is None:
                self._connection = http.client.HTTPSConnection(
                    self._host, self._port, timeout=self.timeout, context=self.credentials.context
                )
            self._connection.request(method, self._prefix + path, body=payload, headers=headers)
            response = self._connection.getresponse()
            data = response.read()
        except (OSError, http.client.HTTPException) as exc:
            self.close()
            raise KubeError(f"{method} {path}: {self.credentials.server} unreachable: {exc}") from None
        if response.status >= 300:
            raise KubeError(f"{method} {path}: HTTP {response.status}: {_status_message(data)}", response.status)
        try:
            return json.loads(data) if data else {}
        except ValueError:
            raise KubeError(f"{method} {path}: the answer is not JSON", response.status) from None

    # -- what the agent asks ------------------------------------------------------------------------------------

    def pods_on(self, node: str) -> list:
        query = urllib.parse.urlencode({"fieldSelector": f"spec.nodeName={node}"})
        answer = self.request("GET", f"/api/v1/pods?{query}")
        items = answer.get("items")
        if not isinstance(items, list):
            raise KubeError("GET /api/v1/pods: the answer has no items list")
        return items

    def node(self, node: str) -> dict:
        return self.request("GET", f"/api/v1/nodes/{urllib.parse.quote(node, safe='')}")

    def patch_node_status(self, node: str, patch: dict) -> dict:
        return self.request(
            "PATCH", f"/api/v1/nodes/{urllib.parse.quote(node, safe='')}/status", patch, STRATEGIC_MERGE
        )

    def node_event(self, node: str, uid: str | None, reason: str, message: str, kind: str = "Normal") -> dict:
        """An Event about the Node (namespace ``default``, where the kubelet puts its node events)."""
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{node}.tee-key-pool.", "namespace": "default"},
            "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid or node},
            "reason": reason,
            "message": message[:1024],
            "type": kind,
            "source": {"component": "tee-key-agent", "host": node},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        return self.request("POST", "/api/v1/namespaces/default/events", event)


def _status_message(data: bytes) -> str:
    try:
        status = json.loads(data)
        return str(status.get("message") or status.get("reason") or "")[:300]
    except ValueError:
        return data[:200].decode("utf-8", "replace")
