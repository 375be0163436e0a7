# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""One emitter per output language the collection writes.

Each emitter makes injection impossible by construction: a value either reads back exactly through that
language's own parser, or it is refused with an :class:`EmitError` naming the variable the caller passed as
``name=`` (the module option or role variable a user can fix). Callers never format these languages by hand.

Standard library only.
"""

from __future__ import annotations

import re

from ansible_collections.confidential.tee.plugins.module_utils.common.errors import TeeError


class EmitError(TeeError):
    """A value that has no safe form in the output language; the message names the variable (``name``, which a
    caller that passed its own option names can turn into :attr:`option`)."""

    name: str | None = None


def refuse(name: str, why: str) -> EmitError:
    """The refusal for variable ``name``: callers ``raise refuse(name, "...")``."""
    refused = EmitError("%s %s" % (name, why))
    refused.name = name
    return refused


# C0 controls, DEL and lone surrogates: what control_characters finds.
_CONTROL = re.compile("[\x00-\x1f\x7f\ud800-\udfff]")


def control_characters(text: str, allowed: str = "") -> list[str]:
    """The characters no output may carry (except those in ``allowed``), for refusal messages: C0 controls, DEL,
    and lone surrogates (bytes that were not UTF-8, kept by surrogateescape), which no UTF-8 file can hold."""
    # Every text of every report passes here, many of them multi-line with "\n" allowed: the scan stays in C
    # (one regular-expression pass) instead of a Python step per character, a tenth of the report's CPU.
    return sorted(set(_CONTROL.findall(text)).difference(allowed))


def describe(chars) -> str:
    return ", ".join(repr(ch) for ch in chars)
