# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""Inventory variables that no role or playbook of this collection reads: typos, reported with "did you mean".

Pure functions over names; the controller side (``plugins/action/tee_inventory_check.py``) reads the known names
from their one home, the roles' ``meta/argument_specs.yml`` and ``defaults/main.yml`` (the playbooks' own
variables: the entry point ``playbook_variables`` of ``roles/role_inputs``), plus what the collection sets itself.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from pathlib import Path

# Every variable of this collection starts with tee_ or with the name of the role it belongs to.
COLLECTION_PREFIX = "tee_"
# How alike a typo and a known name must be to be offered (difflib's ratio): tee_node_consumer and
# tee_node_consumers score 0.97, unrelated names of one role about 0.5.
SUGGESTION_CUTOFF = 0.8
# Facts the collection's modules set (ansible_facts), which a fact cache may hold for any host.
MODULE_FACTS = ("tee_host",)


def prefixes(role_names: Iterable[str]) -> tuple[str, ...]:
    """The variable-name prefixes this collection owns: ``tee_`` and ``<role>_`` for every role."""
    return (COLLECTION_PREFIX, *sorted(f"{name}_" for name in role_names))


def unknown_variables(
    seen: Mapping[str, Iterable[str]], known: Iterable[str], owned: Iterable[str]
) -> list[dict[str, object]]:
    """The variables in ``seen`` (host -> its variable names) that carry one of the ``owned`` prefixes and are not
    ``known``, one entry per name with the hosts that set it and the closest known name (or ``None``).

    Private names (``__...``) are skipped: they are the roles' own.
    """
    known_set, owned_prefixes = {*known, *MODULE_FACTS}, tuple(owned)
    hosts_by_name: dict[str, list[str]] = {}
    for host, names in seen.items():
        for name in names:
            if name.startswith("__") or not name.startswith(owned_prefixes) or name in known_set:
                continue
            hosts_by_name.setdefault(name, []).append(host)
    ordered_known = sorted(known_set)
    found = []
    for name in sorted(hosts_by_name):
        close = difflib.get_close_matches(name, ordered_known, n=1, cutoff=SUGGESTION_CUTOFF)
        found.append({"name": name, "hosts": sorted(hosts_by_name[name]), "did_you_mean": close[0] if close else None})
    return found


def describe(entry: Mapping[str, object], every_host: int) -> str:
    """One line an operator can act on: the variable, where it is set, and the name it probably meant."""
    hosts = list(entry["hosts"])  # type: ignore[call-overload]
    where = "every host (an extra var or group all)" if len(hosts) >= every_host > 1 else ", ".join(hosts)
    hint = f"did you mean {entry['did_you_mean']}?" if entry["did_you_mean"] else "no role or playbook reads it"
    return f"{entry['name']} (set for {where}) is not a variable of confidential.tee: {hint}"


COLLECTION_ROOT = Path(__file__).resolve().parents[3]
SET_FACT = ("ansible.builtin.set_fact", "set_fact")


def _yaml(path: Path) -> object:
    import yaml  # controller side only (the action plugin); no module imports this file

    # libyaml's parser where PyYAML has it: the same documents, a tenth of the time (84 files before every playbook).
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        return yaml.load(path.read_text(encoding="utf-8"), Loader=loader)
    except (OSError, yaml.YAMLError):
        return None


def _set_by_tasks(node: object, out: set[str]) -> None:
    """Names the collection's own tasks set (set_fact keys, register): they may be in a fact cache, never typos."""
    if isinstance(node, list):
        for item in node:
            _set_by_tasks(item, out)
    elif isinstance(node, dict):
        for key, value in node.items():
            if key in SET_FACT and isinstance(value, dict):
                out.update(name for name in value if name != "cacheable")
            elif key == "register" and isinstance(value, str):
                out.add(value)
            else:
                _set_by_tasks(value, out)


def known_variables(root: Path = COLLECTION_ROOT) -> tuple[set[str], tuple[str, ...]]:
    """Every variable name this collection reads or sets, and the prefixes it owns."""
    known: set[str] = set()
    roles = sorted(path for path in (root / "roles").iterdir() if path.is_dir())
    for role in roles:
        specs = _yaml(role / "meta" / "argument_specs.yml") or {}
        for entry in (specs.get("argument_specs") or {}).values():
            known.update((entry or {}).get("options") or {})
        known.update(_yaml(role / "defaults" / "main.yml") or {})
    for tasks in [
        *root.glob("roles/*/tasks/*.yml"),
        *root.glob("roles/*/handlers/*.yml"),
        *root.glob("playbooks/**/*.yml"),
    ]:
        _set_by_tasks(_yaml(tasks), known)
    return known, prefixes(role.name for role in roles if not role.name.startswith("role_inputs"))
