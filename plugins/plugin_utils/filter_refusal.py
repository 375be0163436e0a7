# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""Controller side of a filter's refusal: the template's variables say which node and which inventory variable.

Jinja hands a ``pass_context`` filter the variables of the task being templated (ansible-core 2.19 keeps that
decorator working for filter plugins), so the message can name the host the task runs for, its Kubernetes node
name and the role variable the refused argument came from (``module_utils.common.input_names``).
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.confidential.tee.plugins.module_utils.common.input_names import refusal
from jinja2 import pass_context


def _value(context, name):
    try:
        return context.get(name)
    except Exception:  # an undefined or failing template is no name to show
        return None


def _defined(context, name) -> bool:
    try:
        return name in context and context.get(name) is not None
    except Exception:
        return False


def describe(context, filter_name: str, exc: Exception) -> str:
    return refusal(
        filter_name,
        str(exc),
        getattr(exc, "option", None),
        _value(context, "role_name"),
        _value(context, "inventory_hostname"),
        _value(context, "tee_k8s_node_name"),
        lambda name: _defined(context, name),
    )


def refusing(name: str, func, errors: tuple):
    """``func`` as a filter whose refusals (``errors``) name the filter, the node and the inventory variable."""

    @pass_context
    def run(context, *args, **kwargs):
        try:
            return func(*args, **kwargs)
        except errors as exc:
            raise AnsibleFilterError(describe(context, name, exc)) from exc

    run.__name__ = name
    run.__doc__ = func.__doc__
    return run
