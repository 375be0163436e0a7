# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations


class ModuleDocFragment:
    """Attributes of modules that only read the host."""

    DOCUMENTATION = r"""
attributes:
  check_mode:
    support: full
    description: Only reads files; runs unchanged in check mode.
  diff_mode:
    support: none
    description: Nothing is changed, so there is nothing to diff.
"""
