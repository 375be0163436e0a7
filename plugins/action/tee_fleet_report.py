# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""Action plugin for confidential.tee.tee_fleet_report: the report written without a module round trip.

The report is the controller's file, and the task usually runs on the controller (``hosts: localhost``). There the
module would cost a new interpreter, the import of ``ansible.module_utils.basic``, the compile of the report's
sources and every host's facts packed into the module's payload (about half a second of CPU at 100 hosts, all of
it in the fleet playbook's serial part, `benchmarks/bench_fleet.py`). So when the connection is the controller
itself and nothing is run as another user, this plugin validates the same argument spec and calls the same
``report_run.run_report`` in the worker; anywhere else (a remote host, ``become``) it runs the module as usual.
"""

from __future__ import annotations

import os

from ansible.plugins.action import ActionBase
from ansible_collections.confidential.tee.plugins.module_utils.fleet.report_run import (
    ARGUMENT_SPEC,
    MUTUALLY_EXCLUSIVE,
    ReportError,
    run_report,
)


def runs_here(connection, play_context) -> bool:
    """True when the task's files are this process's files: ansible.builtin.local (transport ``local``, the test
    ActionBase makes too), as the same user. ``become`` would write as another user: the module does that."""
    return getattr(connection, "transport", None) == "local" and not play_context.become


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True
    _supports_async = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        if not runs_here(self._connection, self._play_context):
            result.update(self._execute_module(task_vars=task_vars))
            return result
        _validation, params = self.validate_argument_spec(ARGUMENT_SPEC, mutually_exclusive=MUTUALLY_EXCLUSIVE)
        params = self._as_the_module_sees(params)
        try:
            result.update(run_report(params, bool(self._task.check_mode), bool(self._task.diff)))
        except ReportError as exc:
            result.update(failed=True, msg=str(exc))
            if exc.files is not None:
                result.update(changes=exc.changes, files=exc.files)
        return result

    def _as_the_module_sees(self, params: dict) -> dict:
        """Relative paths read as the module reads them: ansible.builtin.local runs a module in the playbook's
        directory (``ActionBase._low_level_execute_command`` sets the connection's ``cwd`` to the loader's basedir),
        not in the directory ansible-playbook was started from."""
        resolved = dict(params)
        for key in ("dest", "kubernetes_dir"):
            value = resolved.get(key)
            if value and not os.path.isabs(value):
                resolved[key] = os.path.join(self._loader.get_basedir(), value)
        return resolved
