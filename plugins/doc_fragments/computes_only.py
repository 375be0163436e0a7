# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations


class ModuleDocFragment:
    """Attributes of modules that only compute a result from their arguments."""

    DOCUMENTATION = r"""
attributes:
  check_mode:
    support: full
    description: Computes only; runs the same in check mode.
  diff_mode:
    support: none
    description: Nothing is changed.
  platform:
    platforms: posix
"""
