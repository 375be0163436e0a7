"""Real listeners for the attestation tests: an HTTPS server with a CA-signed certificate, a Unix socket."""

from __future__ import annotations

import datetime
import http.server
import ipaddress
import socket
import ssl
import threading
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def _certificate(subject: str, key, issuer_key=None, issuer_name=None, ca=False, names=()):
    now = datetime.datetime.now(datetime.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer_name or name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if names:
        entries = []
        for entry in names:
            try:
                entries.append(x509.IPAddress(ipaddress.ip_address(entry)))
            except ValueError:
                entries.append(x509.DNSName(entry))
        builder = builder.add_extension(x509.SubjectAlternativeName(entries), critical=False)
    return builder.sign(issuer_key or key, hashes.SHA256())


def _pem(cert) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        status = 200 if self.path.endswith("rootcacrl") else 404
        self.send_response(status)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


@pytest.fixture(scope="session")
def pki(tmp_path_factory):
    """A CA and a server certificate for localhost/127.0.0.1, as files: ``{ca_pem, cert, key}``."""
    directory = tmp_path_factory.mktemp("pki")
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _certificate("test PCCS CA", ca_key, ca=True)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _certificate("localhost", key, ca_key, ca.subject, names=("localhost", "127.0.0.1"))
    (directory / "server.crt").write_text(_pem(cert))
    (directory / "server.key").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return {"ca_pem": _pem(ca), "cert": directory / "server.crt", "key": directory / "server.key"}


@pytest.fixture(scope="session")
def https_server(pki):
    """``https://localhost:<port>/sgx/certification/v4/`` served with the CA-signed certificate."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki["cert"], pki["key"])
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"https://localhost:{server.server_address[1]}/sgx/certification/v4/"
    server.shutdown()


@pytest.fixture
def unix_listener():
    """``listen(path) -> socket``: a real listening Unix socket that accepts and closes connections."""
    sockets = []

    def listen(path: Path) -> socket.socket:
        path.parent.mkdir(parents=True, exist_ok=True)
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(str(path))
        server.listen(8)

        def serve():
            while True:
                try:
                    client, _address = server.accept()
                except OSError:
                    return
                client.close()

        threading.Thread(target=serve, daemon=True).start()
        sockets.append(server)
        return server

    yield listen
    for server in sockets:
        server.close()
