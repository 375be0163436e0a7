"""validation: strings are not lists (Ansible would split them on commas), and JSON-safe text."""

from __future__ import annotations

import json

import pytest
from ansible_collections.confidential.tee.plugins.module_utils.common.validation import (
    display_text,
    is_dns1123_subdomain,
    list_of_strings_problem,
)


def test_lists_of_strings_pass():
    assert list_of_strings_problem("x", []) is None
    assert list_of_strings_problem("x", ["iommu=pt,nomerge"]) is None


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("iommu=pt", "got the string 'iommu=pt'"),
        ("iommu=pt,nomerge", "split on commas"),
        ({"a": 1}, "got dict"),
        (3, "got int"),
        (None, "got NoneType"),
        (["ok", 1], "strings only"),
    ],
)
def test_everything_else_is_named(value, fragment):
    problem = list_of_strings_problem("snp_host_extra_kernel_args", value)
    assert problem.startswith("snp_host_extra_kernel_args must") and fragment in problem


def test_display_text_survives_json_with_any_bytes():
    text = b"# caf\xe9\n".decode("utf-8", "surrogateescape")
    shown = display_text(text)
    assert shown == "# caf\\xe9\n"
    json.dumps(shown).encode("utf-8")
    assert display_text(None) is None


def test_no_validation_pattern_accepts_a_trailing_newline():
    # re's "$" also matches before a final "\n": "tee\n" would pass as a file name, "0\n" as a bare TOML key.
    import re
    from pathlib import Path

    plugins = Path(__file__).resolve().parents[4] / "plugins"
    loose = [
        f"{path.relative_to(plugins)}: {pattern}"
        for path in plugins.rglob("*.py")
        for pattern in re.findall(r're\.compile\(r"(\^[^"]*)"', path.read_text())
        if pattern.endswith("$")
    ]
    assert loose == []


@pytest.mark.parametrize(
    "name",
    ["a", "tdx-1", "node.example.com", "0", ".".join(["a" * 63, "b" * 63, "c" * 63, "d" * 61]), "a-b.c-d"],
)
def test_valid_node_names(name):
    assert is_dns1123_subdomain(name)


@pytest.mark.parametrize(
    "name",
    ["", "a..b", "a-.b", "a.-b", "-a", "a-", ".a", "a.", "A", "a_b", "nœud", "a" * 254, None, 5, ["a"]],
    ids=repr,
)
def test_invalid_node_names(name):
    assert not is_dns1123_subdomain(name)
