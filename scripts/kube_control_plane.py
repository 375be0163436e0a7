#!/usr/bin/env python3
"""A real Kubernetes control plane on loopback for the live tests: etcd, kube-apiserver, optionally kube-scheduler.

The binaries are ``make k8s``'s (scripts/build_k8s.py). Everything a start needs is made fresh in a private
directory: a CA and serving/client certificates (real TLS, the ``cryptography`` package), service-account
keys, an admin kubeconfig (``system:masters``) and a least-privilege one (user ``tee-limited``: read-only on the
collection's kinds, for the RBAC tests). The API server runs RBAC and Node authorization with the default
admission plugins (RuntimeClass among them: it adds a RuntimeClass's overhead to pods as on a real cluster) plus
NodeRestriction. Ports are free ones chosen at start, never fixed. ``stop()`` ends the processes and removes
the directory, also after a failed start.

By hand (docs/DEVELOPMENT.md)::

    .venv/bin/python scripts/kube_control_plane.py up --crds ../shared/reference/crds --kubevirt
    export KUBECONFIG=<the admin.kubeconfig it prints>; kubectl get --raw /version

Issue 30's scheduler tests and tests/live use ``ControlPlane`` directly.
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

REPO_ROOT = Path(__file__).resolve().parents[1]
LIMITED_USER = "tee-limited"
# What the least-privilege user may do: read the kinds the collection touches, nothing else.
LIMITED_ROLE = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "ClusterRole",
    "metadata": {"name": "tee-limited-read"},
    "rules": [
        {"apiGroups": [""], "resources": ["nodes", "pods", "namespaces"], "verbs": ["get", "list"]},
        {"apiGroups": ["node.k8s.io"], "resources": ["runtimeclasses"], "verbs": ["get", "list"]},
        {"apiGroups": ["nfd.k8s-sigs.io"], "resources": ["nodefeaturerules"], "verbs": ["get", "list"]},
    ],
}


def free_port() -> int:
    """A loopback port nobody listens on now (the process that binds it may still lose a race: see start)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class Pki:
    """A CA made at start and what it signs; keys are ECDSA P-256 (fast to make, accepted everywhere here)."""

    directory: Path
    ca_key: ec.EllipticCurvePrivateKey = field(init=False)
    ca_cert: x509.Certificate = field(init=False)

    def __post_init__(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.ca_key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "confidential-tee-live-ca")])
        self.ca_cert = (
            self._builder(name, name, self.ca_key.public_key())
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
            .sign(self.ca_key, hashes.SHA256())
        )
        self._write("ca.crt", self.ca_cert.public_bytes(serialization.Encoding.PEM))

    @staticmethod
    def _builder(subject: x509.Name, issuer: x509.Name, public_key, valid_days: float = 2) -> x509.CertificateBuilder:
        """Valid from five minutes ago for ``valid_days``; a negative ``valid_days`` ended that long ago."""
        now = datetime.datetime.now(datetime.UTC)
        start = now - datetime.timedelta(minutes=5) if valid_days > 0 else now - datetime.timedelta(days=2)
        return (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(issuer)
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(now + datetime.timedelta(days=valid_days))
        )

    def _write(self, name: str, data: bytes) -> Path:
        path = self.directory / name
        path.write_bytes(data)
        path.chmod(0o600)
        return path

    def issue(
        self, name: str, common_name: str, *, groups=(), server_names=(), valid_days: float = 2
    ) -> tuple[Path, Path]:
        """Sign a certificate for a client (``common_name`` and ``groups`` are the user and groups) or a server."""
        key = ec.generate_private_key(ec.SECP256R1())
        attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, group) for group in groups]
        subject = x509.Name([*attributes, x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        builder = self._builder(subject, self.ca_cert.subject, key.public_key(), valid_days)
        usage = x509.ExtendedKeyUsageOID.SERVER_AUTH if server_names else x509.ExtendedKeyUsageOID.CLIENT_AUTH
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        if server_names:
            alternatives = [
                x509.IPAddress(ipaddress.ip_address(n)) if n[0].isdigit() else x509.DNSName(n) for n in server_names
            ]
            builder = builder.add_extension(x509.SubjectAlternativeName(alternatives), critical=False)
        cert = builder.sign(self.ca_key, hashes.SHA256())
        key_pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        return self._write(f"{name}.crt", cert.public_bytes(serialization.Encoding.PEM)), self._write(
            f"{name}.key", key_pem
        )

    def service_account_keys(self) -> tuple[Path, Path]:
        key = ec.generate_private_key(ec.SECP256R1())
        private = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        public = key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        return self._write("sa.pub", public), self._write("sa.key", private)


def write_kubeconfig(path: Path, server: str, ca: Path, cert: Path, key: Path, context: str = "tee-live") -> Path:
    """A kubeconfig with its certificates inline (a user's kubeconfig usually is) and one context."""
    import base64

    def inline(p: Path) -> str:
        return base64.b64encode(p.read_bytes()).decode()

    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": context, "cluster": {"server": server, "certificate-authority-data": inline(ca)}}],
        "users": [{"name": context, "user": {"client-certificate-data": inline(cert), "client-key-data": inline(key)}}],
        "contexts": [{"name": context, "context": {"cluster": context, "user": context}}],
        "current-context": context,
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


def k8s_bin_dir() -> Path:
    """The cached binaries of ``make k8s``, built now if missing (minutes the first time, seconds after).

    ``TEE_K8S_BIN_DIR`` names another directory holding etcd, kube-apiserver, kube-scheduler and kubectl.
    """
    if os.environ.get("TEE_K8S_BIN_DIR"):
        return Path(os.environ["TEE_K8S_BIN_DIR"])
    built = subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "build_k8s.py")], capture_output=True, text=True, check=False
    )
    if built.returncode != 0:
        raise RuntimeError(f"make k8s failed:\n{built.stderr[-4000:]}")
    return Path(built.stdout.strip().splitlines()[-1]) / "bin"


def kubevirt_crds() -> list[Path]:
    """KubeVirt's CRDs as its virt-operator generates them (``upstream/build.sh kubevirt-plugins``: KubeVirt
    v1.9.0's own generators, run by upstream/kubevirt-plugins/crdgen; cached, built now if missing)."""
    built = subprocess.run(
        [str(REPO_ROOT / "upstream" / "build.sh"), "kubevirt-plugins"], capture_output=True, text=True, check=False
    )
    if built.returncode != 0:
        raise RuntimeError(f"upstream/build.sh kubevirt-plugins failed:\n{built.stderr[-4000:]}")
    return sorted((Path(built.stdout.strip().rpartition("=")[2]) / "crds").glob("*.yaml"))


def installed_kubevirt(feature_gates: tuple[str, ...] = ("Snapshot",)) -> dict:
    """A KubeVirt CR as an installed KubeVirt v1.9.0 has it (status Deployed), with ``feature_gates`` someone set:
    the collection configures KubeVirt, never installs it."""
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "KubeVirt",
        "metadata": {"name": "kubevirt", "namespace": "kubevirt"},
        "spec": {"configuration": {"developerConfiguration": {"featureGates": list(feature_gates)}}},
        "status": {"phase": "Deployed", "observedKubeVirtVersion": "v1.9.0"},
    }


class ControlPlane:
    """etcd + kube-apiserver (+ kube-scheduler) in ``workdir``; use as a context manager or call start/stop."""

    def __init__(self, bin_dir: Path | None = None, workdir: Path | None = None, scheduler: bool = False):
        self.bin_dir = bin_dir or k8s_bin_dir()
        self._own_workdir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="tee-k8s-"))
        self.want_scheduler = scheduler
        self.processes: dict[str, subprocess.Popen] = {}
        self.server = ""

    # -- lifecycle --------------------------------------------------------------------------------------------
    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self, timeout: float = 180) -> ControlPlane:
        try:
            self.pki = Pki(self.workdir / "pki")
            self._start_etcd(timeout)
            for attempt in range(3):  # a free port can be taken between choosing and binding it
                try:
                    self._start_apiserver(timeout)
                    break
                except RuntimeError:
                    self._end("kube-apiserver")
                    if attempt == 2:
                        raise
            self._write_kubeconfigs()
            self.kubectl(
                "apply",
                "--server-side",
                "--field-manager=tee-live-setup",
                "-f",
                "-",
                input=yaml.safe_dump_all(self._limited_rbac()),
            )
            if self.want_scheduler:
                self.start_scheduler()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for name in reversed(list(self.processes)):
            self._end(name)
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def _end(self, name: str) -> None:
        process = self.processes.pop(name, None)
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen:
        log = open(self.workdir / f"{name}.log", "ab")  # noqa: SIM115 - handed to the child
        try:
            process = subprocess.Popen(
                [str(self.bin_dir / name), *args],
                stdout=log,
                stderr=log,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        finally:
            log.close()
        self.processes[name] = process
        return process

    def log_tail(self, name: str, chars: int = 3000) -> str:
        path = self.workdir / f"{name}.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else ""

    def _wait(self, name: str, ready, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.processes[name].poll() is not None:
                raise RuntimeError(f"{name} exited ({self.processes[name].returncode}):\n{self.log_tail(name)}")
            if ready():
                return
            time.sleep(0.2)
        raise RuntimeError(f"{name} not ready after {timeout:.0f} s:\n{self.log_tail(name)}")

    # -- components -------------------------------------------------------------------------------------------
    def _start_etcd(self, timeout: float) -> None:
        client, peer = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        self._spawn(
            "etcd",
            [
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=default=http://127.0.0.1:{peer}",
                # Throwaway data: no fsync (the tests' speed on a busy disk), little logging.
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
        )

        def healthy() -> bool:
            try:
                with urllib.request.urlopen(f"{self.etcd_url}/health", timeout=2) as reply:
                    return json.load(reply).get("health") == "true"
            except OSError:
                return False

        self._wait("etcd", healthy, timeout)

    def _start_apiserver(self, timeout: float) -> None:
        port = free_port()
        self.server = f"https://127.0.0.1:{port}"
        pki = self.pki
        serving = pki.issue(
            "apiserver",
            "kube-apiserver",
            server_names=("127.0.0.1", "localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"),
        )
        self.admin_cert = pki.issue("admin", "tee-admin", groups=("system:masters",))
        sa_pub, sa_key = pki.service_account_keys()
        ca = pki.directory / "ca.crt"
        self._spawn(
            "kube-apiserver",
            [
                f"--etcd-servers={self.etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={self.workdir / 'apiserver-certs'}",
                f"--tls-cert-file={serving[0]}",
                f"--tls-private-key-file={serving[1]}",
                f"--client-ca-file={ca}",
                "--authorization-mode=Node,RBAC",
                "--enable-admission-plugins=NodeRestriction",
                f"--service-account-key-file={sa_pub}",
                f"--service-account-signing-key-file={sa_key}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                "--service-cluster-ip-range=10.96.0.0/16",
                # The kubernetes Service may not point at loopback: no endpoint reconciler (nothing here reaches it).
                "--endpoint-reconciler-type=none",
                "--allow-privileged=true",
                "--v=0",
            ],
        )
        context = ssl.create_default_context(cafile=str(ca))
        context.load_cert_chain(*map(str, self.admin_cert))

        def ready() -> bool:
            try:
                with urllib.request.urlopen(f"{self.server}/readyz", timeout=3, context=context) as reply:
                    return reply.status == 200
            except OSError:
                return False

        self._wait("kube-apiserver", ready, timeout)

    def start_scheduler(self, timeout: float = 120) -> None:
        cert = self.pki.issue("scheduler", "system:kube-scheduler")
        kubeconfig = write_kubeconfig(self.workdir / "scheduler.kubeconfig", self.server, self.ca, *cert)
        port = free_port()
        self._spawn(
            "kube-scheduler",
            [
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                "--v=0",
            ],
        )

        def ready() -> bool:
            try:
                unverified = ssl._create_unverified_context()  # its own self-signed serving cert; health only
                with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", timeout=3, context=unverified) as r:
                    return r.status == 200
            except OSError:
                return False

        self._wait("kube-scheduler", ready, timeout)

    # -- access -----------------------------------------------------------------------------------------------
    @property
    def ca(self) -> Path:
        return self.pki.directory / "ca.crt"

    def _write_kubeconfigs(self) -> None:
        self.admin_kubeconfig = write_kubeconfig(
            self.workdir / "admin.kubeconfig", self.server, self.ca, *self.admin_cert
        )
        limited = self.pki.issue("limited", LIMITED_USER)
        self.limited_kubeconfig = write_kubeconfig(self.workdir / "limited.kubeconfig", self.server, self.ca, *limited)

    def _limited_rbac(self) -> list[dict]:
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "tee-limited-read"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "tee-limited-read"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": LIMITED_USER}],
        }
        return [LIMITED_ROLE, binding]

    def kubectl(
        self, *args: str, input: str | None = None, kubeconfig: Path | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        command = [str(self.bin_dir / "kubectl"), f"--kubeconfig={kubeconfig or self.admin_kubeconfig}", *args]
        done = subprocess.run(command, input=input, capture_output=True, text=True, timeout=120, check=False)
        if check and done.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
        return done

    def load_objects(self, objects: list[dict]) -> None:
        """Create objects as ``kubectl get -o json`` showed them elsewhere, then write their status as their
        controllers would (a Node's as its kubelet does): server-set fields are dropped, pods' overhead is left to
        RuntimeClass admission, and each namespace gets the ``default`` ServiceAccount a controller-manager makes."""
        objects = [_as_new(obj) for obj in objects]
        namespaces = sorted({o["metadata"]["namespace"] for o in objects if o["metadata"].get("namespace")})
        setup = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}} for ns in namespaces]
        setup += [
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": ns}}
            for ns in namespaces
        ]
        order = {"RuntimeClass": 0, "Node": 1, "Pod": 2}
        objects.sort(key=lambda o: order.get(o["kind"], 0))
        listing = {
            "apiVersion": "v1",
            "kind": "List",
            "items": setup + [{k: v for k, v in o.items() if k != "status"} for o in objects],
        }
        self.kubectl("apply", "--server-side", "--field-manager=tee-live-setup", "-f", "-", input=json.dumps(listing))
        status = [
            {"apiVersion": o["apiVersion"], "kind": o["kind"], "metadata": _identity(o), "status": o["status"]}
            for o in objects
            if o.get("status")
        ]
        if status:
            self.kubectl(
                "apply",
                "--server-side",
                "--subresource=status",
                "--field-manager=tee-live-kubelet",
                # A status-only object: kubectl's client-side check would want the fields a schema requires of the
                # whole object (KubeVirt's spec); the server validates the merged object as ever.
                "--validate=false",
                "-f",
                "-",
                input=json.dumps({"apiVersion": "v1", "kind": "List", "items": status}),
            )

    def install_crds(self, *files: Path) -> None:
        """Install CRDs and wait until the server serves them."""
        for path in files:
            self.kubectl("apply", "--server-side", "--field-manager=tee-live-setup", "-f", str(path))
        self.wait_established()

    def wait_established(self, *names: str, timeout: float = 60) -> None:
        """Wait until the CRDs named (all when none is) are Established. Not `kubectl wait`: a CRD just created has
        no status.conditions yet, and kubectl wait then fails at once ("accessor error: <nil>") instead of waiting."""
        deadline = time.monotonic() + timeout
        while True:
            listing = json.loads(self.kubectl("get", "crd", *names, "-o", "json").stdout)
            items = listing.get("items", [listing]) if names else listing.get("items", [])
            waiting = [
                item["metadata"]["name"]
                for item in items
                if not any(
                    c.get("type") == "Established" and c.get("status") == "True"
                    for c in item.get("status", {}).get("conditions") or []
                )
            ]
            if not waiting:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"CRDs not Established after {timeout:.0f} s: {', '.join(waiting)}")
            time.sleep(0.5)


def _identity(obj: dict) -> dict:
    meta = obj["metadata"]
    return {"name": meta["name"], **({"namespace": meta["namespace"]} if meta.get("namespace") else {})}


def _as_new(obj: dict) -> dict:
    """``obj`` without what the server sets on create (uid, resourceVersion, ...), ready to be created again."""
    meta = {
        k: v
        for k, v in obj["metadata"].items()
        if k not in {"uid", "resourceVersion", "creationTimestamp", "generation", "managedFields"}
    }
    new = {**obj, "metadata": meta}
    if obj["kind"] == "Pod":  # admission sets the overhead, the server the QoS class
        new["spec"] = {k: v for k, v in obj["spec"].items() if k != "overhead"}
        new["status"] = {k: v for k, v in obj.get("status", {}).items() if k != "qosClass"}
    return new


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run the live tests' control plane until interrupted.")
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start etcd and kube-apiserver, print how to reach them, stop on Ctrl-C")
    up.add_argument("--scheduler", action="store_true", help="also run kube-scheduler")
    up.add_argument("--crds", type=Path, action="append", default=[], help="CRD file or directory to install")
    up.add_argument("--kubevirt", action="store_true", help="install KubeVirt's CRDs as its operator generates them")
    args = parser.parse_args(argv)
    started = time.monotonic()
    with ControlPlane(scheduler=args.scheduler) as plane:
        for crds in args.crds:
            plane.install_crds(*(sorted(crds.glob("*.yaml")) if crds.is_dir() else [crds]))
        if args.kubevirt:
            plane.install_crds(*kubevirt_crds())
        print(f"control plane up in {time.monotonic() - started:.1f} s at {plane.server}")
        print(f"export KUBECONFIG={plane.admin_kubeconfig}   # admin (system:masters)")
        print(f"# least privilege ({LIMITED_USER}): {plane.limited_kubeconfig}")
        print(f"# kubectl: {plane.bin_dir / 'kubectl'}; logs in {plane.workdir}; Ctrl-C stops and removes it all")
        sys.stdout.flush()
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        signal.sigwait({signal.SIGINT, signal.SIGTERM})
    return 0


if __name__ == "__main__":
    sys.exit(main())
