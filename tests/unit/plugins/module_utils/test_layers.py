"""module_utils' wings import strictly downward: common < host < boot < {attestation, cluster} < {fleet, agent}.

A wing may import itself and any wing of a lower rank, never one of its own rank or above (attestation and
cluster are siblings: neither may import the other; so are fleet and agent). ``common`` imports nothing outside itself.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4] / "plugins" / "module_utils"
PREFIX = "ansible_collections.confidential.tee.plugins.module_utils."
RANK = {"common": 0, "host": 1, "boot": 2, "attestation": 3, "cluster": 3, "fleet": 4, "agent": 4}


def _imported(tree: ast.AST) -> list[str]:
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.level:
                names.append("<relative>")
            elif node.module.startswith(PREFIX):
                rest = node.module[len(PREFIX) :]
                # `from ...module_utils.common import tee` names the wing as the module itself.
                names.append(rest if "." in rest else f"{rest}.{node.names[0].name}")
        elif isinstance(node, ast.Import):
            names += [a.name[len(PREFIX) :] for a in node.names if a.name.startswith(PREFIX)]
    return names


def test_every_module_lives_in_a_wing() -> None:
    loose = [p.name for p in ROOT.glob("*.py") if p.name != "__init__.py"]
    assert not loose, f"module_utils files outside a wing: {loose}"
    assert {p.name for p in ROOT.iterdir() if p.is_dir() and p.name != "__pycache__"} == set(RANK)


def test_imports_go_downward() -> None:
    problems = []
    for path in sorted(ROOT.rglob("*.py")):
        wing = path.relative_to(ROOT).parts[0]
        for name in _imported(ast.parse(path.read_text(), str(path))):
            if name == "<relative>":
                problems.append(f"{path.relative_to(ROOT)}: relative import (Ansible's packer wants absolute ones)")
                continue
            target = name.split(".")[0]
            if target not in RANK:
                problems.append(f"{path.relative_to(ROOT)} imports {name}: not a wing")
            elif target != wing and RANK[target] >= RANK[wing]:
                problems.append(f"{path.relative_to(ROOT)} ({wing}) imports {name} ({target}): not downward")
    assert not problems, "\n".join(problems)


def test_the_rule_catches_an_upward_import() -> None:
    tree = ast.parse(f"from {PREFIX}fleet.drift import x\nfrom {PREFIX}common import tee\n")
    assert _imported(tree) == ["fleet.drift", "common.tee"]


def _importers() -> list[Path]:
    repo = ROOT.parents[1]
    return [p for d in ("plugins", "tests", "simulator", "benchmarks", "scripts") for p in (repo / d).rglob("*.py")]


def _defined_in(init: Path) -> set[str]:
    """Top-level functions and classes of a package's ``__init__.py`` (importable names besides its modules)."""
    if not init.is_file():
        return set()
    tree = ast.parse(init.read_text(), str(init))
    return {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}


def test_every_collection_import_names_a_module_that_exists() -> None:
    """Every `...module_utils.<wing>.<module>` and `from ...module_utils.<wing> import a, b` names a real file."""
    missing = []
    for path in _importers():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(PREFIX)):
                continue
            dotted = node.module[len(PREFIX) :].split(".")
            # `from ...module_utils.<package> import <module or name>, ...` (a wing, or a package such as
            # common/emit) names modules or what the package's __init__ defines; otherwise the module is named.
            package = ROOT.joinpath(*dotted)
            if package.is_dir():
                targets = [[*dotted, alias.name] for alias in node.names]
                defined = _defined_in(package / "__init__.py")
                missing += [
                    f"{path}: {'.'.join(t)}"
                    for t in targets
                    if not package.joinpath(t[-1] + ".py").is_file() and t[-1] not in defined
                ]
                continue
            if not ROOT.joinpath(*dotted[:-1], dotted[-1] + ".py").is_file():
                missing.append(f"{path}: {'.'.join(dotted)}")
    assert not missing, "\n".join(missing)
