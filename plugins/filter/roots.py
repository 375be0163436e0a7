# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

from ansible.utils.display import Display
from ansible_collections.confidential.tee.plugins.module_utils.common.errors import TeeError
from ansible_collections.confidential.tee.plugins.module_utils.common.input_names import HOST_ROOT, one_host_root
from ansible_collections.confidential.tee.plugins.plugin_utils.filter_refusal import refusing

_display = Display()


def host_root(root=None, **deprecated):
    """The one host root (``tee_host_root``), also from the roles' deprecated ``<role>_host_root`` variables.

    Each deprecated variable given is a deprecation warning (Ansible shows each message once per run); values that
    disagree are refused (``input_names.one_host_root``, the rule).
    """
    chosen, used = one_host_root(root, deprecated)
    for name in used:
        _display.deprecated(
            f"{name} is deprecated: set {HOST_ROOT} instead, the one host root of every role and playbook of "
            "confidential.tee",
            # input_names.HOST_ROOT_REMOVED_IN, written out: ansible-test's pylint checks the literal version.
            version="0.3.0",
            collection_name="confidential.tee",
        )
    return chosen


class FilterModule:
    def filters(self):
        return {"host_root": refusing("host_root", host_root, (TeeError,))}
