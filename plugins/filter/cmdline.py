# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

import re

from ansible.errors import AnsibleFilterError
from ansible_collections.confidential.tee.plugins.module_utils.common.validation import (
    list_of_mappings_problem,
    list_of_strings_problem,
)
from ansible_collections.confidential.tee.plugins.module_utils.host.readiness import describe_cmdline

# A default that is one expression over another variable: {{ name | ... }}.
_TEMPLATE_HEAD = re.compile(r"\s*\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\b")


def cmdline_facts(arguments):
    """The kernel's reading of a list of arguments, with the TDX/SNP verdict (same facts as the modules)."""
    problem = list_of_strings_problem("the input of confidential.tee.cmdline_facts", arguments)
    if problem:
        raise AnsibleFilterError(problem)
    return describe_cmdline(" ".join(arguments), source="arguments")


def list_errors(values, options=None, defaults=None):
    """Messages for every variable that should be a list and is not (empty when all are).

    ``values`` maps variable names to values. With ``options`` (a role's argument_specs options), only variables
    declared ``type: list`` are checked: ``elements: dict`` ones as lists of mappings, the others as lists of
    strings, and ``null`` passes where the spec documents no default (Ansible's own argument validation skips
    ``null`` too). ``defaults`` (the role's ``defaults/main.yml``, unrendered) lets a message name the inventory
    variable a default reads, such as ``tee_cluster_nodes``.
    """
    if not isinstance(values, dict):
        raise AnsibleFilterError("confidential.tee.list_errors expects a dict of variable names to values")
    if options is None:
        specs = {name: {"type": "list", "elements": "str", "required": True} for name in values}
    else:
        specs = {name: spec for name, spec in options.items() if name in values and spec.get("type") == "list"}
    errors = []
    for name in sorted(specs):
        problem = _list_problem(name, values[name], specs[name])
        if problem:
            source = _default_source((defaults or {}).get(name))
            errors.append(f"{problem} ({name} defaults to {source}: fix whichever you set)" if source else problem)
    return errors


def _list_problem(name: str, value: object, spec: dict) -> str | None:
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


class FilterModule:
    def filters(self):
        return {"cmdline_facts": cmdline_facts, "list_errors": list_errors}
