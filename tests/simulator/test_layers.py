"""teesim's layers import strictly downward (no cycles, no reaching up)."""

from __future__ import annotations

import ast
from pathlib import Path

import teesim

LAYERS = ["_collection", "kernel", "kubelet", "plugins", "cluster", "strategies", "report", "cli"]
# Subcommand modules registered by the CLI (e.g. teesim.grpc_run, teesim.serve) sit at the top with it.
TOP = {"cli", "grpc_run", "serve"}


def _layer(module: str) -> int:
    part = module.split(".")[1] if "." in module else ""
    if part in TOP:
        return len(LAYERS)
    return LAYERS.index(part) if part in LAYERS else -1


def test_imports_go_downward() -> None:
    root = Path(teesim.__file__).parent
    problems = []
    for path in root.rglob("*.py"):
        if "generated" in path.parts:
            continue
        rel = path.relative_to(root.parent).with_suffix("")
        module = ".".join(rel.parts)
        own = _layer(module)
        if own < 0:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                if name.startswith("teesim.") and _layer(name) > own:
                    problems.append(f"{module} imports {name}")
    assert not problems, problems
