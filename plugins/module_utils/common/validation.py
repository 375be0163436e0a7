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


# A default that is one expression over another variable: {{ name | ... }}.
_TEMPLATE_HEAD = re.compile(r"\s*\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\b")


def list_option_errors(values: dict, options: dict | None = None, defaults: dict | None = None) -> list[str]:
    """Messages for every variable that should be a list and is not (empty when all are).

    ``values`` maps variable names to values. With ``options`` (a role's argument_specs options), only variables
    declared ``type: list`` are checked: ``elements: dict`` ones as lists of mappings, the others as lists of
    strings, and ``null`` passes where the spec documents no default (Ansible's own argument validation skips
    ``null`` too). ``defaults`` (the role's ``defaults/main.yml``, unrendered) lets a message name the inventory
    variable a default reads, such as ``tee_cluster_nodes``.
    """
    if options is None:
        specs = {name: {"type": "list", "elements": "str", "required": True} for name in values}
    else:
        specs = {name: spec for name, spec in options.items() if name in values and spec.get("type") == "list"}
    errors = []
    for name in sorted(specs):
        problem = _option_list_problem(name, values[name], specs[name])
        if problem:
            source = _default_source((defaults or {}).get(name))
            errors.append(f"{problem} ({name} defaults to {source}: fix whichever you set)" if source else problem)
    return errors


def _option_list_problem(name: str, value: object, spec: dict) -> str | None:
    if value is None and _null_allowed(spec):
        return None
    if spec.get("elements", "str") != "dict":
        return list_of_strings_problem(name, value)
    return list_of_mappings_problem(name, value)


def _null_allowed(spec: dict) -> bool:
    """Whether ``null`` is a documented value: the option is not required and documents no other default."""
    return not spec.get("required", False) and spec.get("default") is None


def _default_source(raw_default: object) -> str | None:
    """The variable an unrendered default such as ``{{ tee_cluster_nodes | default([]) }}`` starts from."""
    if not isinstance(raw_default, str):
        return None
    match = _TEMPLATE_HEAD.match(raw_default)
    return match.group(1) if match else None


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
