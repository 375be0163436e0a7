# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.confidential.tee.plugins.module_utils.common.validation import (
    list_of_strings_problem,
    list_option_errors,
)
from ansible_collections.confidential.tee.plugins.module_utils.host.readiness import describe_cmdline


def cmdline_facts(arguments):
    """The kernel's reading of a list of arguments, with the TDX/SNP verdict (same facts as the modules)."""
    problem = list_of_strings_problem("the input of confidential.tee.cmdline_facts", arguments)
    if problem:
        raise AnsibleFilterError(problem)
    return describe_cmdline(" ".join(arguments), source="arguments")


def list_errors(values, options=None, defaults=None):
    """Messages for every variable that should be a list and is not (empty when all are); see ``list_option_errors``."""
    if not isinstance(values, dict):
        raise AnsibleFilterError("confidential.tee.list_errors expects a dict of variable names to values")
    return list_option_errors(values, options, defaults)


class FilterModule:
    def filters(self):
        return {"cmdline_facts": cmdline_facts, "list_errors": list_errors}
