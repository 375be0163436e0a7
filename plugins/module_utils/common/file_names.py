# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""File names built from user values (node names, object names): one path component that always fits.

Linux limits one path component to ``NAME_MAX`` = 255 bytes (``include/uapi/linux/limits.h``); a Kubernetes
object name alone may have 253 characters, so ``50-node-<name>.yaml`` can be longer. Such a name keeps a readable
prefix and ends in ``_`` and 32 hex digits of the SHA-256 of the full identity: the same on every run, distinct for
distinct identities, and never equal to a plain name as long as plain names hold no ``_`` (Kubernetes names and
the stems built from them never do).
"""

from __future__ import annotations

import hashlib

NAME_MAX = 255
DIGEST_CHARS = 32


def fits(name: str, limit: int = NAME_MAX) -> bool:
    return len(name.encode("utf-8", "surrogatepass")) <= limit


def hashed_name(readable: str, identity: str, suffix: str, limit: int = NAME_MAX) -> str:
    """``<prefix of readable>_<digest of identity><suffix>``, at most ``limit`` bytes."""
    digest = hashlib.sha256(identity.encode("utf-8", "surrogatepass")).hexdigest()[:DIGEST_CHARS]
    room = limit - len(suffix.encode("utf-8", "surrogatepass")) - 1 - DIGEST_CHARS
    prefix = readable.encode("utf-8", "surrogatepass")[: max(room, 0)].decode("utf-8", "ignore")
    return f"{prefix}_{digest}{suffix}"


def bounded_name(stem: str, suffix: str, identity: str | None = None, limit: int = NAME_MAX) -> str:
    """``stem + suffix`` when it fits ``limit`` bytes, else :func:`hashed_name` (``identity``: the stem by default)."""
    if fits(stem + suffix, limit):
        return stem + suffix
    return hashed_name(stem, stem if identity is None else identity, suffix, limit)
