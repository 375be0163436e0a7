# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""One HTTPS request the way QCNL's libcurl makes it, and the host's CA bundle it trusts.

QCNL (``QuoteGeneration/qcnl/linux/network_wrapper.cpp``) leaves libcurl's peer and host verification on
unless ``use_secure_cert`` is false, in which case it turns both off (``CURLOPT_SSL_VERIFYPEER/VERIFYHOST 0``).
libcurl trusts the distribution's CA bundle; :data:`CA_BUNDLES` lists where each family keeps it.

Standard library only.
"""

from __future__ import annotations

import http.client
import socket
import ssl
from urllib.parse import urlsplit

CA_BUNDLES = (
    "etc/ssl/certs/ca-certificates.crt",  # Debian, Ubuntu (update-ca-certificates)
    "etc/pki/tls/certs/ca-bundle.crt",  # RHEL, Fedora, CentOS Stream
    "etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",  # RHEL, extracted
    "etc/ssl/ca-bundle.pem",  # SUSE
)
CA_LIMIT = 8 * 1024 * 1024


def host_ca_bundle(reader, explicit: str | None = None) -> tuple[str | None, str | None]:
    """``(PEM text, path)`` of the host's CA bundle (``explicit`` first), ``(None, why)`` when there is none."""
    for rel in [explicit] if explicit else CA_BUNDLES:
        read = reader.read(rel, limit=CA_LIMIT, record=False)
        if read.data is not None:
            return read.text(), reader.path(rel)
    where = explicit or ", ".join("/" + rel for rel in CA_BUNDLES)
    return None, f"no CA bundle found ({where})"


def request(url: str, verify: bool, cadata: str | None, timeout: float) -> dict:
    """GET ``url``: ``{"status", "error", "error_kind"}``; never raises."""
    parts = urlsplit(url)
    result = {"status": None, "error": None, "error_kind": None}
    if parts.scheme not in ("http", "https") or not parts.hostname:
        result.update(error=f"{url!r} is not an http(s) URL", error_kind="url")
        return result
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        result.update(error=f"{url!r} has an invalid port", error_kind="url")
        return result
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        if parts.scheme == "https":
            context = _context(verify, cadata)
            connection = http.client.HTTPSConnection(parts.hostname, port, timeout=timeout, context=context)
        else:
            connection = http.client.HTTPConnection(parts.hostname, port, timeout=timeout)
        try:
            connection.request("GET", path, headers={"User-Agent": "confidential.tee tdx_attestation_check"})
            response = connection.getresponse()
            response.read(64 * 1024)
            result["status"] = response.status
        finally:
            connection.close()
    except ssl.SSLCertVerificationError as exc:
        result.update(error=exc.verify_message or str(exc), error_kind="certificate")
    except ssl.SSLError as exc:
        result.update(error=f"TLS: {exc.reason or exc}", error_kind="tls")
    except (socket.timeout, TimeoutError):
        result.update(error=f"no answer within {timeout:g} s", error_kind="timeout")
    except socket.gaierror as exc:
        result.update(error=f"cannot resolve {parts.hostname}: {exc.strerror}", error_kind="dns")
    except ConnectionRefusedError:
        result.update(error=f"connection refused: nothing listens on {parts.hostname}:{port}", error_kind="refused")
    except (OSError, http.client.HTTPException) as exc:
        result.update(error=f"{type(exc).__name__}: {exc}", error_kind="network")
    return result


def _context(verify: bool, cadata: str | None) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if verify:
        context.verify_mode = ssl.CERT_REQUIRED
        context.check_hostname = True
        if cadata:
            context.load_verify_locations(cadata=cadata)
    else:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context
