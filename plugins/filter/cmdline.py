# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.confidential.tee.plugins.module_utils.common.validation import list_of_strings_problem
from ansible_collections.confidential.tee.plugins.module_utils.host.readiness import describe_cmdline


def cmdline_facts(arguments):
    """The kernel's reading of a list of arguments, with the TDX/SNP verdict (same facts as the modules)."""
    problem = list_of_strings_problem("the input of confidential.tee.cmdline_facts", arguments)
    if problem:
        raise AnsibleFilterError(problem)
    return describe_cmdline(" ".join(arguments), source="arguments")


def list_errors(values, options=None):
    """Messages for every variable that should be a list of strings and is not (empty when all are).

    ``values`` maps variable names to values; with ``options`` (a role's argument_specs options), only
    variables declared ``type: list`` are checked.
    """
    if not isinstance(values, dict):
        raise AnsibleFilterError("confidential.tee.list_errors expects a dict of variable names to values")
    wanted = (
        None
        if options is None
        else {
            name
            for name, spec in options.items()
            # Lists of dicts (elements: dict) are checked by their own specs, not as lists of strings.
            if spec.get("type") == "list" and spec.get("elements", "str") == "str"
        }
    )
    errors = []
    for name in sorted(values):
        if wanted is not None and name not in wanted:
            continue
        problem = list_of_strings_problem(name, values[name])
        if problem:
            errors.append(problem)
    return errors


class FilterModule:
    def filters(self):
        return {"cmdline_facts": cmdline_facts, "list_errors": list_errors}
