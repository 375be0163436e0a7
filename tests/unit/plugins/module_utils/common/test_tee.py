# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""The TEE vocabulary is consistent, and no other Python file of the collection or of teesim spells it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from ansible_collections.confidential.tee.plugins.module_utils.common import tee

ROOT = Path(__file__).resolve().parents[5]
VOCABULARY_FILE = ROOT / "plugins" / "module_utils" / "common" / "tee.py"
SCANNED = (ROOT / "plugins", ROOT / "simulator" / "teesim")

# Kubernetes' qualified name for an extended resource (apimachinery ``validation.IsQualifiedName``):
# a DNS-1123 subdomain prefix, "/", then a name of at most 63 alphanumerics, "-", "_" or ".".
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
QUALIFIED_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?\Z")

# String constants equal to a vocabulary name that may stay where they are, each with the reason (none today).
ALLOWED_LITERALS: dict[tuple[str, str], str] = {}


def test_every_technology_charges_a_known_misc_resource():
    assert {t.misc for t in tee.TECHNOLOGIES} == set(tee.MISC_RESOURCES)
    assert {t.vendor for t in tee.TECHNOLOGIES} == set(tee.VENDORS)
    assert tee.MISC_OF_TECHNOLOGY["SEV-SNP"] == tee.SEV_ES  # SNP guests charge the SEV-ES ASID pool


def test_the_misc_orders_and_aliases_name_the_same_resources():
    assert sorted(tee.MISC_REPORT_ORDER) == sorted(tee.MISC_RESOURCES)
    assert len(set(tee.MISC_RESOURCES)) == len(tee.MISC_RESOURCES)
    assert set(tee.MISC_ALIASES.values()) <= set(tee.MISC_RESOURCES)
    assert not set(tee.MISC_ALIASES) & set(tee.MISC_RESOURCES)
    assert set(tee.VENDOR_KEY_POOL.values()) <= set(tee.MISC_RESOURCES)
    for vendor, resources in tee.VENDOR_MISC_RESOURCES.items():
        assert tee.VENDOR_KEY_POOL[vendor] in resources
    assert set(tee.NFD_FEATURES.values()) <= set(tee.MISC_RESOURCES)


@pytest.mark.parametrize("name", tee.EXTENDED_RESOURCES)
def test_every_extended_resource_is_a_qualified_name(name):
    prefix, _, local = name.partition("/")
    assert DNS_SUBDOMAIN.match(prefix) and len(prefix) <= 253, name
    assert QUALIFIED_NAME.match(local), name
    assert not prefix.endswith("kubernetes.io"), f"extended resources live outside kubernetes.io: {name}"


def test_no_extended_resource_is_listed_twice():
    assert len(set(tee.EXTENDED_RESOURCES)) == len(tee.EXTENDED_RESOURCES)
    pools = [pool.resource for pool in tee.KEY_POOLS]
    assert len(set(pools)) == len(pools)


def test_every_key_resource_is_in_the_vocabulary():
    listed = set(tee.EXTENDED_RESOURCES)
    for pool in tee.KEY_POOLS:
        assert pool.resource in listed and pool.misc in tee.MISC_RESOURCES and pool.consumer in tee.CONSUMERS
    for consumer, names in tee.KEY_RESOURCES_OF.items():
        assert consumer in tee.CONSUMERS
        assert set(names) <= set(tee.MISC_RESOURCES) and set(names.values()) <= listed
    # Each key pool entry agrees with the consumer's table.
    for pool in tee.KEY_POOLS:
        assert tee.KEY_RESOURCES_OF[pool.consumer][pool.misc] == pool.resource
    assert tee.KUBEVIRT_GENERIC_DEVICES and set(tee.KUBEVIRT_GENERIC_DEVICES) <= listed


def _docstring_nodes(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _python_files():
    for top in SCANNED:
        for path in sorted(top.rglob("*.py")):
            if "generated" in path.relative_to(top).parts or path == VOCABULARY_FILE:
                continue
            yield path


def _spelled(source: str, filename: str) -> list[tuple[int, str]]:
    """``(line, name)`` for every string constant equal to a vocabulary name, docstrings left out."""
    names = set(tee.EXTENDED_RESOURCES)
    tree = ast.parse(source, filename)
    docstrings = _docstring_nodes(tree)
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names
        if id(node) not in docstrings
    ]


def test_the_guard_sees_literals_but_not_docstrings_or_prose():
    source = (
        '"""Module on devices.kubevirt.io/tdx."""\n'
        "def f():\n"
        '    """devices.kubevirt.io/tdx"""\n'
        '    return {"devices.kubevirt.io/tdx": 1}, "uses devices.kubevirt.io/tdx"\n'
    )
    assert _spelled(source, "example.py") == [(4, "devices.kubevirt.io/tdx")]


def test_no_file_but_the_vocabulary_spells_an_extended_resource():
    files = list(_python_files())
    assert len(files) > 50  # the scan found the trees
    spelled = [
        f"{path.relative_to(ROOT)}:{line} {name!r}"
        for path in files
        for line, name in _spelled(path.read_text(encoding="utf-8"), str(path))
        if (str(path.relative_to(ROOT)), name) not in ALLOWED_LITERALS
    ]
    assert not spelled, "import these from plugins/module_utils/common/tee.py instead:\n" + "\n".join(spelled)
