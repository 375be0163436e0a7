# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""Input rules shared by modules and role filters, and text made safe for Ansible's JSON.

Ansible's ``type: list`` turns a string into a list by splitting it on commas. For kernel arguments that
silently changes the meaning (``iommu=pt,nomerge`` becomes two arguments), so list inputs of this collection
are checked here, strictly, with messages naming the variable. Standard library only.
"""

from __future__ import annotations

import re

# apimachinery pkg/util/validation/validation.go (IsDNS1123Subdomain, v0.36): dot-separated DNS-1123 labels of
# [a-z0-9-], each starting and ending alphanumeric, at most 253 characters in all. Node names are such names.
DNS1123_SUBDOMAIN_MAX = 253
_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = re.compile(r"%s(\.%s)*\Z" % (_DNS1123_LABEL, _DNS1123_LABEL))


def is_dns1123_subdomain(name: object) -> bool:
    """Whether ``name`` is a valid Kubernetes object name of the subdomain kind (Nodes, RuntimeClasses, ...)."""
    return isinstance(name, str) and len(name) <= DNS1123_SUBDOMAIN_MAX and bool(_DNS1123_SUBDOMAIN.match(name))


# What a string where a list belongs turns into, per element type: the reason it must be refused.
_SPLIT_HINTS = {
    "strings": "a string would be split on commas, and commas belong inside kernel arguments (iommu=pt,nomerge)",
    "mappings": "a string would be split on commas and read as key=value pairs",
}


def _list_problem(name: str, value: object, kind: str, element: type, example: str) -> str | None:
    if isinstance(value, str):
        wanted = "a list" if kind == "strings" else f"a list of {kind}"
        return (
            f"{name} must be {wanted}, got the string {value!r}: write it as a YAML list ({example}); "
            + (_SPLIT_HINTS[kind])
        )
    if not isinstance(value, (list, tuple)):
        return f"{name} must be a list of {kind}, got {type(value).__name__} {value!r}"
    wrong = [item for item in value if not isinstance(item, element)]
    if wrong:
        return f"{name} must hold {kind} only, got {wrong[0]!r} ({type(wrong[0]).__name__})"
    return None


def list_of_strings_problem(name: str, value: object) -> str | None:
    """Why ``value`` is not a list of strings, naming ``name``; ``None`` when it is one."""
    return _list_problem(name, value, "strings", str, f"[{value}]")


def list_of_mappings_problem(name: str, value: object) -> str | None:
    """Why ``value`` is not a list of mappings, naming ``name``; ``None`` when it is one."""
    return _list_problem(name, value, "mappings", dict, "one mapping per entry: - key: value")


def display_text(text: str | None) -> str | None:
    """Text safe for JSON: bytes that are not UTF-8 (kept as surrogates) become visible ``\\xe9`` escapes."""
    if text is None:
        return None
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def as_text(data) -> str:
    """Parser input as text: ``bytes`` decoded as UTF-8 with U+FFFD for bad bytes, ``None`` as empty."""
    if data is None:
        return ""
    if isinstance(data, bytes):
        return data.decode("utf-8", "replace")
    return str(data)
