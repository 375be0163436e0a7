# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""JSON documents that ``json.loads`` (and every strict RFC 8259 reader) reads back to the same data.

``allow_nan=False``: NaN and Infinity are not JSON, Python would write them as bare words other readers refuse.
Keys are sorted so the same data always gives the same bytes; non-ASCII text is kept as UTF-8.

Standard library only.
"""

from __future__ import annotations

import json as _json

from ansible_collections.confidential.tee.plugins.module_utils.common.emit import refuse


def dumps(data: object, name: str = "document", indent: int | None = 2) -> str:
    """``data`` as JSON text ending in a newline."""
    try:
        return _json.dumps(data, ensure_ascii=False, sort_keys=True, allow_nan=False, indent=indent) + "\n"
    except (ValueError, TypeError) as exc:
        raise refuse(name, "has no JSON form: %s" % exc) from None
