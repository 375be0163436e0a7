# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""Which objects an apply would change, decided from the live objects: the plan of ``tee_cluster_apply``.

An object is sent only when the plan says it differs, so a run that changes nothing sends no write (not even a
dry run). The comparison is conservative: whenever it cannot prove that the write would be a no-op, the object
is written.

- ``present`` (server-side apply by ``field_manager``): unchanged when the object exists, ``field_manager`` holds
  an ``Apply`` entry of the same apiVersion in its ``metadata.managedFields``, every field of the applied
  configuration has that value in the live object (lists compared whole), and the entry owns no map field the
  configuration no longer sets (server-side apply would remove it) and no other count of list items.
- ``patched`` (JSON merge patch, RFC 7396): unchanged when applying the patch to the live object gives the live
  object back: every key set has that value, every key set to null is absent.
- ``absent``: unchanged when the object does not exist.

Standard library only; the module does the API calls.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal

STATES = ("present", "patched", "absent")


def object_ref(obj: dict) -> str:
    """``Kind/namespace/name`` (``Kind/name`` for cluster-scoped objects), as messages name an object."""
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{obj.get('kind')}/{namespace + '/' if namespace else ''}{meta.get('name')}"


# Maps whose values are resource quantities in Kubernetes' own types (RuntimeClass overhead.podFixed, a container's
# resources, a Node's capacity, a ResourceQuota's hard): the API server stores a quantity in its canonical form
# (10240Mi is read back as 10Gi), so their values are compared as numbers. Anywhere else strings compare as text.
QUANTITY_MAPS = frozenset(("podFixed", "limits", "requests", "capacity", "allocatable", "hard"))
QUANTITY = re.compile(r"^([+-]?[0-9]+(?:\.[0-9]*)?|[+-]?\.[0-9]+)(m|k|Ki|M|Mi|G|Gi|T|Ti|P|Pi|E|Ei|[eE][+-]?[0-9]+)?\Z")
SUFFIXES = {
    "": 1,
    "m": Decimal("0.001"),
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}


def quantity(text) -> Decimal | None:
    """The value of a Kubernetes quantity string (``2048Mi``, ``250m``, ``1e3``), or None if it is not one."""
    match = QUANTITY.match(text) if isinstance(text, str) else None
    if match is None:
        return None
    number, suffix = Decimal(match.group(1)), match.group(2) or ""
    if suffix[:1] in ("e", "E"):
        return number.scaleb(int(suffix[1:]))
    return number * SUFFIXES[suffix]


def contains(live, wanted, quantities: bool = False) -> bool:
    """Whether ``live`` holds every field of ``wanted`` with its value (maps: a subset; lists: item by item).

    ``quantities``: ``wanted`` is a map of QUANTITY_MAPS (or a value in one): quantities are equal when their values
    are.
    """
    if isinstance(wanted, dict):
        return isinstance(live, dict) and all(
            k in live and contains(live[k], v, k in QUANTITY_MAPS if isinstance(v, dict) else quantities)
            for k, v in wanted.items()
        )
    if isinstance(wanted, list):
        return isinstance(live, list) and len(live) == len(wanted) and all(map(contains, live, wanted))
    if quantities and quantity(wanted) is not None:
        return quantity(live) == quantity(wanted)
    return _same_scalar(live, wanted)


def _same_scalar(live, wanted) -> bool:
    # A bool is an int in Python: True must not match 1; 1 and 1.0 are the same JSON number.
    if isinstance(live, bool) or isinstance(wanted, bool):
        return type(live) is type(wanted) and live == wanted
    numbers = (int, float)
    if isinstance(live, numbers) and isinstance(wanted, numbers):
        return live == wanted
    return type(live) is type(wanted) and live == wanted


def merge_patch_is_noop(live, patch) -> bool:
    """Whether the RFC 7396 merge patch ``patch`` leaves ``live`` as it is."""
    if not isinstance(patch, dict):
        # Lists and scalars replace what is there: equal both ways.
        return contains(live, patch) and contains(patch, live)
    if not isinstance(live, dict):
        return False
    for key, value in patch.items():
        if value is None:
            if key in live:
                return False
        elif key not in live or not merge_patch_is_noop(live[key], value):
            return False
    return True


def owned_beyond(fields: dict, wanted) -> bool:
    """Whether the managedFields tree ``fields`` (fieldsV1) owns something ``wanted`` no longer sets.

    A map field owned but not set would be removed by the apply; a list whose owned items (``k:``, ``v:``, ``i:``
    entries) are not as many as the items set would change. Items themselves are compared by :func:`contains`.
    """
    if not isinstance(fields, dict):
        return True
    items = [key for key in fields if key[:2] in ("k:", "v:", "i:")]
    if items:
        return not isinstance(wanted, list) or len(items) != len(wanted)
    for key, child in fields.items():
        if key == ".":
            continue
        if not key.startswith("f:") or not isinstance(wanted, dict):
            return True
        name = key[2:]
        if name not in wanted or (child and owned_beyond(child, wanted[name])):
            return True
    return False


def applied_entry(live: dict, manager: str, api_version: str) -> dict | None:
    """``manager``'s server-side apply entry of ``live``'s managedFields for ``api_version``, or None."""
    for entry in (live.get("metadata") or {}).get("managedFields") or []:
        if (
            entry.get("manager") == manager
            and entry.get("operation") == "Apply"
            and entry.get("apiVersion") == api_version
            and not entry.get("subresource")
        ):
            return entry
    return None


def apply_is_noop(live: dict, wanted: dict, manager: str) -> bool:
    """Whether a server-side apply of ``wanted`` by ``manager`` would leave ``live`` unchanged (see the module doc)."""
    entry = applied_entry(live, manager, wanted.get("apiVersion", ""))
    if entry is None or not contains(live, wanted):
        return False
    return not owned_beyond(entry.get("fieldsV1") or {}, wanted)


@dataclass
class Step:
    """One object of the plan: what happens to it (create, update, patch, delete, unchanged) and why."""

    obj: dict
    action: str
    live: dict | None

    @property
    def ref(self) -> str:
        return object_ref(self.obj)

    @property
    def writes(self) -> bool:
        return self.action != "unchanged"


def plan_step(obj: dict, live: dict | None, state: str, manager: str) -> Step:
    """The step for ``obj`` given its live object (None: it does not exist)."""
    if state == "absent":
        return Step(obj, "delete" if live is not None else "unchanged", live)
    if live is None:
        return Step(obj, "create" if state == "present" else "missing", None)
    if state == "patched":
        return Step(obj, "unchanged" if merge_patch_is_noop(live, obj) else "patch", live)
    return Step(obj, "unchanged" if apply_is_noop(live, obj, manager) else "update", live)


def projection(live, wanted):
    """The part of ``live`` that ``wanted`` speaks about (the "before" of a diff)."""
    if isinstance(wanted, dict) and isinstance(live, dict):
        return {k: projection(live[k], v) for k, v in wanted.items() if k in live}
    return live


def input_errors(objects: list, state: str) -> list[str]:
    """What is wrong with the objects given, before any API call (each named by its position and reference)."""
    errors = []
    if state not in STATES:
        errors.append(f"state must be one of {', '.join(STATES)} (got {state!r})")
    seen = set()
    for index, obj in enumerate(objects):
        where = f"objects[{index}]"
        if not isinstance(obj, dict):
            errors.append(f"{where} is not a mapping")
            continue
        missing = [k for k in ("apiVersion", "kind") if not isinstance(obj.get(k), str) or not obj.get(k)]
        meta = obj.get("metadata")
        if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta.get("name"):
            missing.append("metadata.name")
        if missing:
            errors.append(f"{where} has no {', '.join(missing)}")
            continue
        key = (obj["apiVersion"], object_ref(obj))
        if key in seen:
            errors.append(f"{where}: {object_ref(obj)} is given twice")
        seen.add(key)
    return errors
