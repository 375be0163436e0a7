"""teesim's layers (rooms) import strictly downward (no cycles, no reaching up), and every room has a place."""

from __future__ import annotations

import ast
from pathlib import Path

import teesim

# engine: the domain-free clock; fixtures: fleet trees, Kubernetes objects, captures (kernel model only);
# plugins: the real gRPC plugins and their in-process models (which stand on cluster's SimNode);
# sim: the simulation environment and the scenario loader beside it; _native: which build runs (it
# imports no teesim module, so that it can choose before any is imported); _args: command-line types.
LAYERS = [
    "_native",
    "_args",
    "engine",
    "_collection",
    "kernel",
    "fixtures",
    "kubelet",
    "cluster",
    "plugins",
    "strategies",
    "sim",
    "report",
    "cli",
]
# Subcommand modules registered by the CLI (e.g. teesim.grpc_run, teesim.serve) sit at the top with it.
TOP = {"cli", "grpc_run", "serve"}
ROOT = Path(teesim.__file__).parent


def _layer(module: str) -> int:
    part = module.split(".")[1] if "." in module else ""
    if part in TOP:
        return len(LAYERS)
    return LAYERS.index(part) if part in LAYERS else -1


def test_every_room_has_a_layer() -> None:
    rooms = {p.stem for p in ROOT.glob("*.py") if p.stem != "__init__"}
    rooms |= {p.parent.name for p in ROOT.glob("*/__init__.py")}
    unplaced = sorted(room for room in rooms if room not in LAYERS and room not in TOP)
    assert not unplaced, f"place these teesim rooms in LAYERS or TOP of {__file__}: {unplaced}"


def test_imports_go_downward() -> None:
    problems = []
    for path in ROOT.rglob("*.py"):
        if "generated" in path.parts:
            continue
        rel = path.relative_to(ROOT.parent).with_suffix("")
        module = ".".join(rel.parts)
        own = _layer(module)
        assert own >= 0 or module == "teesim.__init__", f"{module} is in no layer"
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
