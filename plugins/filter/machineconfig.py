# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.confidential.tee.plugins.module_utils.boot.machineconfig import MachineConfigError, render


def machineconfig(kernel_arguments, name, role="worker", files=None, labels=None):
    try:
        return render(name, role, kernel_arguments, files, labels)
    except MachineConfigError as exc:
        raise AnsibleFilterError(f"confidential.tee.machineconfig: {exc}") from exc


class FilterModule:
    def filters(self):
        return {"machineconfig": machineconfig}
