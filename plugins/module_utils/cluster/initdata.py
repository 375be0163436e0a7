# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""Kata / Confidential Containers initdata: TOML, pod annotation, digest and attestation values.

Standard library only. Formats followed (read in upstream sources, 2026-08):

* initdata document: ``version = "0.1.0"``, ``algorithm`` one of sha256/sha384/sha512, and a ``[data]``
  table of string values; the Kata agent reads the keys ``aa.toml``, ``cdh.toml`` and ``policy.rego``
  (kata-containers ``src/libs/kata-types/src/initdata.rs``, ``src/agent/src/initdata.rs``;
  trustee ``kbs/docs/initdata.md``).
* digest: the hash named by ``algorithm`` over the exact TOML text; the annotation
  ``io.katacontainers.config.hypervisor.cc_init_data`` carries base64(gzip(TOML)), which the runtime
  decodes back to the same text before hashing.
* binding: TDX ``MRCONFIGID`` is the digest zero-padded or truncated to 48 bytes, SNP ``HOSTDATA`` to
  32 bytes (Kata ``adjust_digest``); on vTPM platforms the attestation agent extends PCR 8 of the SHA-256
  bank with the digest and accepts only a 32-byte (sha256) digest (guest-components
  ``attester/src/az_*_vtpm``), so PCR 8 = SHA-256(32 zero bytes || digest), as the OpenShift sandboxed
  containers documentation computes it.
* Checked again against kata-containers ``src/libs/kata-types/src/initdata.rs`` at 014ab2f (2026): version
  ``0.1.0`` only, algorithms sha256/sha384/sha512, ``adjust_digest`` 48 bytes (TDX) / 32 (SNP) / 64 (CCA),
  annotation = STANDARD base64 of a gzip stream. What it cannot promise: runtime-rs
  (``add_hypervisor_initdata_overrides``) parses the decoded document and hands the hypervisor its own
  ``toml::to_string_pretty`` re-serialization, whose digest is taken over that text, not over the text written
  here; with runtime-rs compare the register value with the one the runtime logs. The Go runtime was not re-read.
"""

from __future__ import annotations

import base64
import difflib
import gzip
import hashlib
import re

from ansible_collections.confidential.tee.plugins.module_utils.common.emit.toml import TomlError, dumps
from ansible_collections.confidential.tee.plugins.module_utils.common.errors import TeeError

ANNOTATION = "io.katacontainers.config.hypervisor.cc_init_data"
VERSION = "0.1.0"
ALGORITHMS = ("sha256", "sha384", "sha512")
TDX_MRCONFIGID_BYTES = 48
SNP_HOSTDATA_BYTES = 32
CDH_SOCKET = "unix:///run/confidential-containers/cdh.sock"

# Kata agent ttRPC requests an agent policy decides (kata-containers src/kata-opa/allow-all.rego).
AGENT_REQUESTS = (
    "AddARPNeighborsRequest",
    "AddSwapRequest",
    "CloseStdinRequest",
    "CopyFileRequest",
    "CreateContainerRequest",
    "CreateSandboxRequest",
    "DestroySandboxRequest",
    "ExecProcessRequest",
    "GetDiagnosticDataRequest",
    "GetMetricsRequest",
    "GetOOMEventRequest",
    "GuestDetailsRequest",
    "ListInterfacesRequest",
    "ListRoutesRequest",
    "MemAgentCompactConfig",
    "MemAgentMemcgConfig",
    "MemHotplugByProbeRequest",
    "OnlineCPUMemRequest",
    "PauseContainerRequest",
    "PullImageRequest",
    "ReadStreamRequest",
    "RemoveContainerRequest",
    "RemoveStaleVirtiofsShareMountsRequest",
    "ReseedRandomDevRequest",
    "ResumeContainerRequest",
    "SetGuestDateTimeRequest",
    "SetPolicyRequest",
    "SignalProcessRequest",
    "StartContainerRequest",
    "StartTracingRequest",
    "StatsContainerRequest",
    "StopTracingRequest",
    "TtyWinResizeRequest",
    "UpdateContainerRequest",
    "UpdateEphemeralMountsRequest",
    "UpdateInterfaceRequest",
    "UpdateRoutesRequest",
    "WaitProcessRequest",
    "WriteStreamRequest",
)

# What the restrictive default denies: calls through which the untrusted host reads or drives the
# inside of the TEE. Everything a pod needs to be created, run and stopped stays allowed.
DENIED_BY_DEFAULT = {
    "ExecProcessRequest": "lets the host run commands inside the TEE (kubectl exec)",
    "ReadStreamRequest": "lets the host read container stdout and stderr (kubectl logs)",
    "WriteStreamRequest": "lets the host write to container stdin (kubectl attach)",
    "SetPolicyRequest": "lets the host replace this policy after the TEE started",
    "GetDiagnosticDataRequest": "lets the host pull diagnostic data out of the guest",
}


class InitdataError(TeeError):
    """Input that cannot become a valid initdata document; the message says which field and how to fix it."""


def _suggest(name: str) -> str:
    close = difflib.get_close_matches(name, AGENT_REQUESTS, n=1)
    return " (did you mean %s?)" % close[0] if close else ""


def policy_decisions(allow=(), deny=()):
    """``{request: bool}`` for every agent request: the restrictive default with the overrides applied."""
    for field, names in (("policy_allow", allow), ("policy_deny", deny)):
        if isinstance(names, str) or not isinstance(names, (list, tuple)):
            raise InitdataError("%s must be a list of agent request names, got %r" % (field, names))
        for name in names:
            if name not in AGENT_REQUESTS:
                raise InitdataError(
                    "%s: %r is not a Kata agent request%s; known requests: %s"
                    % (field, name, _suggest(str(name)), ", ".join(AGENT_REQUESTS))
                )
    both = sorted(set(allow) & set(deny))
    if both:
        raise InitdataError("requests both allowed and denied: %s; list each in one of the two" % ", ".join(both))
    decisions = {name: name not in DENIED_BY_DEFAULT for name in AGENT_REQUESTS}
    decisions.update({name: True for name in allow})
    decisions.update({name: False for name in deny})
    return decisions


def policy_rego(decisions: dict) -> str:
    """An agent policy of ``default <Request> := true|false`` rules, sorted by request name."""
    lines = [
        "# Generated by confidential.tee.kata_initdata: one default decision per Kata agent request.",
        "package agent_policy",
        "",
    ]
    lines += ["default %s := %s" % (name, "true" if decisions[name] else "false") for name in sorted(decisions)]
    return "\n".join(lines) + "\n"


def permissive_warnings(decisions: dict) -> list:
    return [
        "agent policy allows %s, which %s; the restrictive default denies it" % (name, why)
        for name, why in sorted(DENIED_BY_DEFAULT.items())
        if decisions.get(name)
    ]


_REGO_ALLOW = re.compile(r"^\s*default\s+(\w+)\s*:?=\s*true\b", re.MULTILINE)


def raw_policy_warnings(rego: str) -> list:
    warnings = ["policy_rego is used as given; it is not checked beyond its default rules"]
    if not re.search(r"^\s*package\s+agent_policy\b", rego, re.MULTILINE):
        warnings.append("policy_rego does not declare 'package agent_policy'; the Kata agent will not load it")
    allowed = set(_REGO_ALLOW.findall(rego))
    warnings += [
        "policy_rego allows %s by default, which %s" % (name, why)
        for name, why in sorted(DENIED_BY_DEFAULT.items())
        if name in allowed
    ]
    return warnings


def _merge(base: dict, extra: dict, where: str) -> dict:
    if not isinstance(extra, dict):
        raise InitdataError("%s must be a mapping, got %s" % (where, type(extra).__name__))
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value, "%s.%s" % (where, key))
        else:
            merged[key] = value
    return merged


def _check_url(name: str, url: str, warnings: list) -> None:
    if not isinstance(url, str) or not re.match(r"^[a-z][a-z0-9+.-]*://\S+$", url):
        raise InitdataError("%s %r is not a URL such as https://kbs.example.com:8080" % (name, url))
    if url.startswith("http://"):
        warnings.append(
            "%s %s is plain HTTP: attestation evidence and the secrets the KBS releases travel unencrypted; "
            "use https with kbs_cert" % (name, url)
        )


def attestation_configs(spec: dict, warnings: list):
    """``(aa.toml mapping, cdh.toml mapping)`` from the KBS settings, or ``(None, None)`` without a KBS."""
    kbs_url = spec.get("kbs_url")
    if not kbs_url:
        warnings.append(
            "no kbs_url: the attestation agent and confidential data hub get no configuration, so the "
            "guest cannot attest or obtain keys and secrets"
        )
        if spec.get("aa") or spec.get("cdh"):
            raise InitdataError("aa and cdh settings need kbs_url: set the Key Broker Service URL too")
        return None, None
    _check_url("kbs_url", kbs_url, warnings)
    cert = spec.get("kbs_cert")
    if cert is not None and "-----BEGIN CERTIFICATE-----" not in cert:
        raise InitdataError("kbs_cert must be a PEM certificate (-----BEGIN CERTIFICATE----- ...)")
    if kbs_url.startswith("https://") and not cert:
        warnings.append("kbs_url is https but no kbs_cert is given: the guest trusts only the CAs built into its image")
    as_url = spec.get("attestation_service_url") or kbs_url
    _check_url("attestation_service_url", as_url, warnings)
    kbs_token = {"url": kbs_url}
    kbc = {"name": "cc_kbc", "url": kbs_url}
    if cert:
        kbs_token["cert"] = cert
        kbc["kbs_cert"] = cert
    aa = {"token_configs": {"coco_as": {"url": as_url}, "kbs": kbs_token}}
    cdh = {"socket": CDH_SOCKET, "credentials": [], "kbc": kbc}
    policy_uri = spec.get("image_security_policy_uri")
    if policy_uri:
        cdh["image"] = {"image_security_policy_uri": policy_uri}
    else:
        warnings.append(
            "no image_security_policy_uri: the confidential data hub does not verify container image "
            "signatures in the guest"
        )
    return _merge(aa, spec.get("aa") or {}, "aa"), _merge(cdh, spec.get("cdh") or {}, "cdh")


def _data(spec: dict, warnings: list) -> dict:
    data = {}
    aa, cdh = attestation_configs(spec, warnings)
    try:
        if aa is not None:
            data["aa.toml"] = dumps(aa, multiline_keys=("cert",))
            data["cdh.toml"] = dumps(cdh, multiline_keys=("kbs_cert",))
    except TomlError as exc:
        raise InitdataError("aa/cdh settings: %s" % exc) from exc
    raw = spec.get("policy_rego")
    if raw:
        if spec.get("policy_allow") or spec.get("policy_deny"):
            raise InitdataError("give either policy_rego or policy_allow/policy_deny, not both")
        warnings.extend(raw_policy_warnings(raw))
        data["policy.rego"] = raw
    else:
        decisions = policy_decisions(spec.get("policy_allow") or [], spec.get("policy_deny") or [])
        warnings.extend(permissive_warnings(decisions))
        data["policy.rego"] = policy_rego(decisions)
    for key, value in (spec.get("extra_data") or {}).items():
        if key in data:
            raise InitdataError("extra_data key %r is generated from the other options; remove it" % key)
        if not isinstance(value, str):
            raise InitdataError("extra_data[%r] must be a string (initdata data values are strings)" % key)
        data[key] = value
    return data


def document(spec: dict):
    """``(toml_text, data, warnings)``: the initdata TOML for ``spec`` and its ``[data]`` table."""
    algorithm = spec.get("algorithm") or "sha256"
    if algorithm not in ALGORITHMS:
        raise InitdataError("algorithm %r is not supported; use one of %s" % (algorithm, ", ".join(ALGORITHMS)))
    warnings: list = []
    data = _data(spec, warnings)
    text = dumps({"version": VERSION, "algorithm": algorithm, "data": data}, multiline_keys=tuple(data))
    return text, data, warnings


def digest(text: str, algorithm: str) -> bytes:
    return hashlib.new(algorithm, text.encode("utf-8")).digest()


def annotation_value(text: str) -> str:
    """base64(gzip(text)) with a fixed gzip header (mtime 0), so equal documents give equal annotations."""
    return base64.b64encode(gzip.compress(text.encode("utf-8"), compresslevel=9, mtime=0)).decode("ascii")


def fit(raw: bytes, size: int) -> bytes:
    """Truncate or zero-pad to ``size`` bytes, as Kata does for the TEE's initdata register."""
    return raw[:size] if len(raw) >= size else raw + b"\0" * (size - len(raw))


def pcr8(raw_digest: bytes):
    """``(hex, reason)``: PCR 8 of the SHA-256 bank after one extend with the digest, or ``(None, why)``."""
    if len(raw_digest) != 32:
        return None, (
            "PCR 8 is extended only with a 32-byte digest (the vTPM attester rejects others): "
            "use algorithm sha256 for vTPM-based platforms"
        )
    return hashlib.sha256(b"\0" * 32 + raw_digest).hexdigest(), None


def build(spec: dict) -> dict:
    """Everything the module returns for ``spec``."""
    text, data, warnings = document(spec)
    algorithm = spec.get("algorithm") or "sha256"
    raw = digest(text, algorithm)
    pcr, pcr_reason = pcr8(raw)
    return {
        "toml": text,
        "policy_rego": data["policy.rego"],
        "annotation_name": ANNOTATION,
        "annotation": annotation_value(text),
        "algorithm": algorithm,
        "digest": raw.hex(),
        "digest_base64": base64.b64encode(raw).decode("ascii"),
        "tdx_mrconfigid": fit(raw, TDX_MRCONFIGID_BYTES).hex(),
        "snp_hostdata": fit(raw, SNP_HOSTDATA_BYTES).hex(),
        "pcr8": pcr,
        "pcr8_reason": pcr_reason,
        "warnings": warnings,
    }
