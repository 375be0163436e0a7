"""Which names the kubelet accepts from a device plugin, and the words it refuses them with.

Follows ``pkg/kubelet/cm/devicemanager/plugin/v1beta1/server.go`` (``Register``) and
``v1helper.IsExtendedResourceName`` (``pkg/apis/core/v1/helper/helpers.go``):

* the API version must be one of ``SupportedVersions`` (only ``v1beta1``);
* the name must be an *extended* resource: it contains a ``/``, ``kubernetes.io/`` appears nowhere
  in it (``IsPrefixedNativeResource`` tests ``strings.Contains``), it does not start with
  ``requests.``, and ``"requests." + name`` is a Kubernetes *qualified name*: one ``/``, a DNS-1123
  subdomain of at most 253 characters before it (so the plugin's own domain may use at most
  253 - len("requests.") = 244), and at most 63 alphanumerics, ``-``, ``_`` or ``.`` after it,
  starting and ending alphanumeric.

Go's ``regexp`` anchors ``$`` at the very end of the text (RE2 without the ``m`` flag), while Python's
``$`` also matches before a final newline: ``example.com/tdx\\n`` is *invalid* upstream (the name part
``tdx\\n`` fails ``qualifiedNameRegexp`` in ``k8s.io/apimachinery/pkg/util/validation/validation.go``,
v1.34), so every pattern here is applied with ``fullmatch``.

The kubelet answers with its own fixed sentences (``errUnsupportedVersion``,
``errInvalidResourceName``); :class:`RegistrationError` carries that exact text, plus ``reason``,
teesim's explanation of *which* rule failed (the kubelet says only "is invalid"). Names in the
kubelet's sentences are quoted as Go's ``%q`` quotes them (:func:`teesim.kubelet.gofmt.go_quote`).
"""

from __future__ import annotations

import re

from teesim.kubelet.gofmt import go_quote

API_VERSION = "v1beta1"
SUPPORTED_VERSIONS = (API_VERSION,)
QUOTA_PREFIX = "requests."
MAX_SUBDOMAIN = 253
MAX_NAME_PART = 63
MAX_PLUGIN_DOMAIN = MAX_SUBDOMAIN - len(QUOTA_PREFIX)

# qualifiedNameFmt and dns1123SubdomainFmt (k8s.io/apimachinery/pkg/util/validation/validation.go,
# v1.34), used with fullmatch: Go's "^...$" never matches before a trailing newline.
_QUALIFIED_NAME_RE = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS1123_SUBDOMAIN_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


class RegistrationError(ValueError):
    """The kubelet rejected a Register call (the plugin is expected to exit).

    ``str(err)`` is the kubelet's message; ``err.reason`` says which rule the name broke.
    """

    def __init__(self, message: str, reason: str = ""):
        super().__init__(message)
        self.reason = reason or message


def extended_resource_name_problem(name: str) -> str | None:
    """Why ``name`` is not an extended resource name, or None when the kubelet accepts it."""
    if "/" not in name:
        return f"{name!r} has no domain prefix; device plugins must use 'vendor.example.com/name'"
    if "kubernetes.io/" in name:
        return f"{name!r} is in the kubernetes.io namespace, which is reserved for native resources"
    if name.startswith(QUOTA_PREFIX):
        return f"{name!r} must not start with {QUOTA_PREFIX!r}"
    prefix, _, short = name.rpartition("/")
    if "/" in prefix:
        return f"{name!r} has more than one '/'"
    if not prefix or not _DNS1123_SUBDOMAIN_RE.fullmatch(prefix):
        return f"prefix {prefix!r} of {name!r} is not a DNS-1123 subdomain (lower-case alphanumerics, '-', '.')"
    if len(prefix) > MAX_PLUGIN_DOMAIN:
        return (
            f"prefix of {name!r} is {len(prefix)} characters; with the quota prefix {QUOTA_PREFIX!r} "
            f"it must stay within {MAX_SUBDOMAIN}, so at most {MAX_PLUGIN_DOMAIN}"
        )
    if not short or len(short) > MAX_NAME_PART or not _QUALIFIED_NAME_RE.fullmatch(short):
        return (
            f"name part {short!r} of {name!r} is not a qualified name "
            f"(<= {MAX_NAME_PART} alphanumerics, '-', '_', '.', alphanumeric at both ends)"
        )
    return None


def check_registration(resource: str, version: str) -> None:
    """Raise :class:`RegistrationError` with the kubelet's wording when Register must be refused."""
    if version not in SUPPORTED_VERSIONS:
        supported = "[" + " ".join(go_quote(v) for v in SUPPORTED_VERSIONS) + "]"
        raise RegistrationError(
            f"requested API version {go_quote(version)} is not supported by kubelet. Supported version is {supported}",
            f"the plugin speaks {version!r}; this kubelet speaks only {', '.join(SUPPORTED_VERSIONS)}",
        )
    problem = extended_resource_name_problem(resource)
    if problem:
        raise RegistrationError(f"the ResourceName {go_quote(resource)} is invalid", problem)
