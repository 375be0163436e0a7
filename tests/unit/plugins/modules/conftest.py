"""Drive a module's ``main()`` in-process and capture what it would have returned to Ansible."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from ansible.module_utils import basic
from ansible.module_utils.common.warnings import get_warning_messages
from ansible.module_utils.testing import patch_module_args


def as_ansible_json(result: dict[str, Any]) -> None:
    """Fail the test where Ansible would fail the task: results must encode as strict UTF-8 JSON."""
    json.dumps(result, ensure_ascii=False).encode("utf-8")


class ModuleResult(Exception):
    """Raised in place of exit_json/fail_json so the test sees the result instead of a SystemExit."""

    def __init__(self, result: dict[str, Any]) -> None:
        super().__init__(result.get("msg", ""))
        self.result = result


@pytest.fixture
def run_module(monkeypatch: pytest.MonkeyPatch) -> Callable[..., dict[str, Any]]:
    def exit_json(self: basic.AnsibleModule, **kwargs: Any) -> None:
        result = {"failed": False, "warnings": list(get_warning_messages()), **kwargs}
        as_ansible_json(result)
        raise ModuleResult(result)

    def fail_json(self: basic.AnsibleModule, msg: str, **kwargs: Any) -> None:
        result = {**kwargs, "failed": True, "msg": msg}
        as_ansible_json({k: v for k, v in result.items() if k != "exception"})
        raise ModuleResult(result)

    monkeypatch.setattr(basic.AnsibleModule, "exit_json", exit_json)
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", fail_json)

    def run(module: Any, args: dict[str, Any], check_mode: bool = False) -> dict[str, Any]:
        full_args = dict(args, _ansible_check_mode=check_mode)
        with patch_module_args(full_args), pytest.raises(ModuleResult) as raised:
            module.main()
        return raised.value.result

    return run
