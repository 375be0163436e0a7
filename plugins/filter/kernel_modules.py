# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.confidential.tee.plugins.module_utils.host.kernel_modules import name_problems


def kernel_module_problems(modules, variable="modules"):
    """Why ``modules`` is not a list of kernel module names, naming ``variable`` (the rule of kernel_modules)."""
    if not isinstance(variable, str) or not variable:
        raise AnsibleFilterError("confidential.tee.kernel_module_problems: variable must be a non-empty string")
    return name_problems(modules, variable)


class FilterModule:
    def filters(self):
        return {"kernel_module_problems": kernel_module_problems}
