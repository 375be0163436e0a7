# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

from ansible_collections.confidential.tee.plugins.module_utils.boot.machineconfig import MachineConfigError, render
from ansible_collections.confidential.tee.plugins.plugin_utils.filter_refusal import refusing


def machineconfig(kernel_arguments, name, role="worker", files=None, labels=None):
    return render(name, role, kernel_arguments, files, labels)


class FilterModule:
    def filters(self):
        return {"machineconfig": refusing("machineconfig", machineconfig, (MachineConfigError,))}
