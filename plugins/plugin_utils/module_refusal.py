# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""Controller side of a module's refusal: the task's variables say which host and which inventory variable.

A module knows only its options: when module_utils refuses a value, the module fails with the message and the
option it came in as (``option``: ``vsock_port``, or ``settings.pccs_url`` for a key of a dict option). A role fills
the option from a variable of its own; the action plugin of the module runs it as usual and, on such a failure,
names the host, its Kubernetes node, and the variable (``module_utils.common.input_names``, the one table of option
to variable), as the filters do (``filter_refusal``). Without a role, the option stays the name shown.
"""

from __future__ import annotations

from collections.abc import Mapping

from ansible.plugins.action.normal import ActionModule as NormalAction
from ansible_collections.confidential.tee.plugins.module_utils.common.errors import REFUSED_OPTION
from ansible_collections.confidential.tee.plugins.module_utils.common.input_names import module_refusal


def named(result: dict, module_name: str, task_vars: Mapping, component=None) -> dict:
    """``result`` with a refusal's message naming the host and the variable (or the option); other results as they
    are."""
    option = result.pop(REFUSED_OPTION, None)
    if not result.get("failed") or not option or not isinstance(result.get("msg"), str):
        return result

    def defined(name: str) -> bool:
        return name in task_vars and task_vars[name] is not None

    # ansible-core 2.19 keeps the module's own message as the error it displays (result["exception"], captured in
    # _execute_module); a refusal carries no traceback, so dropping it lets the task's error be the message below.
    result.pop("exception", None)
    result["msg"] = module_refusal(
        module_name,
        result["msg"],
        option,
        task_vars.get("role_name"),
        task_vars.get("inventory_hostname"),
        task_vars.get("tee_k8s_node_name"),
        defined,
        component,
    )
    return result


class RefusalNamingAction(NormalAction):
    """Runs the module of the same name as ansible.builtin.normal does (check mode, async, its temporary directory);
    a refusal's message then names the host and the variable.

    ``COMPONENT_OPTION`` names the option that tells apart what one module configures (dcap_config's ``component``).
    """

    COMPONENT_OPTION: str | None = None

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        component = self._task.args.get(self.COMPONENT_OPTION) if self.COMPONENT_OPTION else None
        return named(result, self._task.action.rsplit(".", 1)[-1], task_vars or {}, component)
