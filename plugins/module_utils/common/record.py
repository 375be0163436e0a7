# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""Value classes for the code every host imports, without the import-time cost of ``dataclasses``.

On a managed host a module imports its module_utils from source on every run: AnsiballZ ships sources and
``zipimport`` never caches bytecode. ``@dataclass`` then compiles the methods it generates (``exec``) for every
class at import: the twelve that ``tee_host_info`` imported cost 20 M instructions per host and task, 5 % of what
the module costs on a host above ``ping`` (valgrind on the AnsiballZ payloads, docs/fleet.md). A :class:`Record`
names its fields in ``__slots__`` and writes its ``__init__``; equality, ``repr`` and, for the immutable ones,
hashing come from the fields. The other domains (boot, attestation), which run once per change rather than once
per host and report, keep ``dataclasses``.

Standard library only.
"""

from __future__ import annotations


class Record:
    """Fields are ``__slots__``; equal when of the same class with equal fields. Immutable by convention: a
    subclass that is changed after it is built sets ``__hash__ = None``, as ``@dataclass`` does for it."""

    __slots__ = ()

    def _values(self) -> tuple:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._values() == other._values()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        shown = ", ".join("%s=%r" % (name, getattr(self, name)) for name in self.__slots__)
        return "%s(%s)" % (type(self).__name__, shown)
