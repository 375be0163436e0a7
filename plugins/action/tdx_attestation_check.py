# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""Action plugin for confidential.tee.tdx_attestation_check: the module as usual; a refused option names the role's
variable and the host (``plugin_utils.module_refusal``)."""

from __future__ import annotations

from ansible_collections.confidential.tee.plugins.plugin_utils.module_refusal import RefusalNamingAction as ActionModule

__all__ = ["ActionModule"]
