# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.confidential.tee.plugins.module_utils.common.validation import list_of_strings_problem

# Loads, in one command (one round trip to the host), the modules missing from /sys/module, where a module loaded
# or built in has a directory; prints "missing: <names>" when any was missing, and in check mode only prints.
# The names are the script's arguments, never part of its text, so no name can add a command.
_LOAD_MISSING_SCRIPT = (
    'mode="$1"; shift; '
    'for module in "$@"; do shift; [ -e "/sys/module/$module" ] || set -- "$@" "$module"; done; '
    '[ "$#" -gt 0 ] || exit 0; echo "missing: $*"; '
    '[ "$mode" = check ] || modprobe -a -- "$@"'
)


def load_missing_modules_argv(modules, check_mode=False):
    """The argv of ``ansible.builtin.command`` that loads the missing ``modules`` (only names them in check mode)."""
    problem = list_of_strings_problem("the input of confidential.tee.load_missing_modules_argv", modules)
    if problem:
        raise AnsibleFilterError(problem)
    mode = "check" if check_mode else "load"
    return ["/bin/sh", "-c", _LOAD_MISSING_SCRIPT, "load-missing-modules", mode, *modules]


class FilterModule:
    def filters(self):
        return {"load_missing_modules_argv": load_missing_modules_argv}
