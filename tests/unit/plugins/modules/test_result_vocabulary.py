"""Every module speaks the one result vocabulary of common/results.py (docs/modules.md, result vocabulary).

What changed is ``changes``, a check is a check record, a problem list is ``problems``; a key that says the same
under an old name is documented as deprecated, with the release that removes it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

MODULES = sorted((Path(__file__).parents[4] / "plugins" / "modules").glob("*.py"))
DEPRECATED = "Deprecated, removed in release 0.3.0; read "
# The names results had before the vocabulary: each may only be documented as a deprecated alias.
OLD_NAMES = {"files", "backups", "actions", "written", "written_secrets", "written_private", "removed", "writes"}
OLD_NAMES |= {"objects", "issues"}
# Here the old name means something else: advice about a plan is a warning, not a problem the module could not use.
OTHER_MEANINGS = {("tee_key_pools", "plan.warnings")}


def documented(module: Path) -> dict:
    tree = ast.parse(module.read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "RETURN":
            return yaml.safe_load(node.value.value) or {}
    return {}


def walk(entries: dict, prefix: str = ""):
    for name, entry in entries.items():
        yield prefix + name, entry
        yield from walk(entry.get("contains") or {}, prefix + name + ".")


def description(entry: dict) -> str:
    text = entry.get("description")
    return " ".join(text) if isinstance(text, list) else str(text)


def writes(module: Path) -> bool:
    source = module.read_text()
    return "Changes(" in source or "change_summary(" in source or "run_report" in source


@pytest.mark.parametrize("module", MODULES, ids=lambda path: path.stem)
def test_old_names_are_only_deprecated_aliases(module):
    for name, entry in walk(documented(module)):
        leaf = name.rsplit(".", 1)[-1]
        if (module.stem, name) in OTHER_MEANINGS or leaf not in OLD_NAMES | {"warnings"}:
            continue
        if leaf == "warnings" and name.count(".") == 0:
            continue  # Ansible's own key for module.warn(); never documented by a module
        assert description(entry).startswith(DEPRECATED), f"{module.stem}: RV({name}) is an old name, not deprecated"


@pytest.mark.parametrize("module", [m for m in MODULES if writes(m)], ids=lambda path: path.stem)
def test_every_module_that_changes_something_returns_changes(module):
    entries = documented(module)
    assert "changes" in entries, f"{module.stem} writes but does not document RV(changes)"
    text = description(entries["changes"])
    assert "result vocabulary" in text
    for key in ("written", "removed", "hidden", "commands", "backups", "entries"):
        assert f"C({key})" in text, f"{module.stem}: RV(changes) does not describe {key}"
    sample = entries["changes"]["sample"]
    assert list(sample) == ["written", "removed", "hidden", "commands", "backups", "entries"]
    assert all(set(entry) == {"name", "changed", "reasons"} for entry in sample["entries"])


def test_a_problem_list_has_one_name():
    names = {
        (module.stem, name)
        for module in MODULES
        for name, entry in walk(documented(module))
        if name.rsplit(".", 1)[-1] == "problems"
    }
    assert {("tee_capacity_info", "problems"), ("tee_host_info", "host.problems")} <= names
    assert ("tee_fleet_report", "problems") in names
