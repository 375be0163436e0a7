# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""The one exception base type of the collection's module_utils.

Every error a module_utils function raises on purpose (bad input, a host file that does not parse, a write that
is refused) is a :class:`TeeError`, so a module can catch "what this collection refuses" in one clause and let
anything else (a bug) surface with its traceback. It is a ``ValueError`` because every such error is about a
value: the callers that caught ``ValueError`` before keep working.

Standard library only.
"""

from __future__ import annotations


class TeeError(ValueError):
    """A refusal of this collection; the message says what, where and how to fix it.

    ``option`` names the input the refused value came in as (a filter's argument or option key, such as
    ``qgs_socket_path``), so the filter that calls the function can name the inventory variable it was given as.
    """

    def __init__(self, *args, option: str | None = None):
        super().__init__(*args)
        self.option = option


# The key of a failed module result that names the option the refused value came in as; the module's action plugin
# (plugin_utils.module_refusal) names the role variable and the host from it, and removes it.
REFUSED_OPTION = "refused_option"


def refused_option(option: str | None) -> dict:
    """What a module adds to its failure for a refusal of ``option`` (a :attr:`TeeError.option`); nothing for none."""
    return {REFUSED_OPTION: option} if option else {}
