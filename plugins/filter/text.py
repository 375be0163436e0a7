# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.confidential.tee.plugins.module_utils.common import text
from ansible_collections.confidential.tee.plugins.module_utils.common.validation import list_of_strings_problem


def name_list(names, shown=text.NAMES_SHOWN):
    """``a, b, c`` or, past ``shown`` names, the first ``shown`` and ``and N more`` (module_utils/common/text.py)."""
    problem = list_of_strings_problem("the input of confidential.tee.name_list", names)
    if problem:
        raise AnsibleFilterError(problem)
    if isinstance(shown, bool) or not isinstance(shown, int) or shown < 1:
        raise AnsibleFilterError(
            "confidential.tee.name_list: shown must be a whole number of at least 1, got %r" % (shown,)
        )
    return text.name_list(names, shown)


class FilterModule:
    def filters(self):
        return {"name_list": name_list}
