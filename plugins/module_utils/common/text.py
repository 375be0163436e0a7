# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""Lists of names in messages a person reads: a plan or a warning over 5,000 nodes names a few and counts the rest.

The full lists stay in the returned data (the plan's ``nodes``, ``kubevirt.tdx_nodes``, a warning's fields); a
message only has to say which kind of node and how many, and show enough names to find them.
"""

from __future__ import annotations

# How many names a message shows before it counts the rest.
NAMES_SHOWN = 10


def name_list(names, shown: int = NAMES_SHOWN) -> str:
    """``a, b, c`` for a short list; ``a, b, c and 4,997 more`` past ``shown`` names (the count has thousands
    separators, so it is never mistaken for a name)."""
    names = [str(name) for name in names]
    if len(names) <= shown:
        return ", ".join(names)
    return "%s and %s more" % (", ".join(names[:shown]), format(len(names) - shown, ","))
