"""teesim._collection imports the collection's parser, or loads the checkout's file by path."""

from __future__ import annotations

import importlib
import sys

import pytest
import teesim._collection as collection


def test_uses_the_collections_parser_file() -> None:
    assert collection.misc_cgroup.__file__.endswith("plugins/module_utils/misc_cgroup.py")
    assert collection.parse_misc_text("tdx 3\n").values == {"tdx": 3}


def test_falls_back_to_checkout_path(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(name: str, *args, **kwargs):
        if name.startswith("ansible_collections"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    real_import = importlib.import_module
    monkeypatch.setattr(importlib, "import_module", refuse)
    monkeypatch.delitem(sys.modules, collection._FALLBACK_NAME, raising=False)
    module = collection._load()
    assert module.__name__ == collection._FALLBACK_NAME
    assert module.U64_MAX == (1 << 64) - 1
