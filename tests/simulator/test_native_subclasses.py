"""No interpreted class of teesim customises a compiled one.

mypyc compiles :data:`teesim._native.MODULES`. Compiled code reads a compiled class's attributes from its
native layout, so an interpreted subclass that redefines one (``node_kubelet_class = ServeNodeKubelet``
was one: ``teesim serve`` ran the plain kubelet and never called a plugin's ``Allocate`` in the native
build) changes the source build and not the compiled one. The rule: a class outside the compiled modules
that derives from a class inside them defines none of the base's members (class attributes, methods,
properties, annotated or ``self.``-assigned attributes); collaborators are passed in, or the subclass is
compiled too. This walks every module of the package, whichever build runs.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import sys
from functools import cache
from pathlib import Path

import pytest
import teesim
import teesim._native as native

COMPILED = frozenset(native.MODULES)
# What every class has, whoever wrote it.
IGNORED = frozenset(
    {
        "__module__",
        "__qualname__",
        "__doc__",
        "__dict__",
        "__weakref__",
        "__annotations__",
        "__firstlineno__",
        "__static_attributes__",
        "__parameters__",
        "__orig_bases__",
        "__abstractmethods__",
        "_abc_impl",
    }
)


def _teesim_modules() -> list[str]:
    names = []
    for info in pkgutil.walk_packages(teesim.__path__, "teesim."):
        if ".generated" in info.name:
            continue
        names.append(info.name)
    return sorted(names)


@cache
def _source_members(module: str, qualname: str) -> frozenset[str]:
    """Names a compiled class defines in its source: its body's names and annotations, ``self.x =`` in methods."""
    if module not in sys.modules:
        return frozenset()
    # A compiled module's __file__ is its extension: read the source it was compiled from.
    path = native.module_source(module) if module in COMPILED else Path(sys.modules[module].__file__)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == qualname.rsplit(".", 1)[-1]:
            names = set()
            for item in node.body:  # the class body: methods, class attributes, annotations
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    names.add(item.name)
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    names.add(item.target.id)
                elif isinstance(item, ast.Assign):
                    names.update(t.id for t in item.targets if isinstance(t, ast.Name))
            for item in ast.walk(node):  # instance attributes: self.x = ... anywhere in its methods
                targets = item.targets if isinstance(item, ast.Assign) else []
                targets = [item.target] if isinstance(item, (ast.AnnAssign, ast.AugAssign)) else targets
                names.update(
                    t.attr
                    for t in targets
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
                )
            return frozenset(names)
    return frozenset()


def _members(base: type) -> frozenset[str]:
    """Every member of ``base`` an override could shadow: what Python sees and what its source defines."""
    return frozenset(dir(base)) | _source_members(base.__module__, base.__qualname__)


def overrides(cls: type, compiled: frozenset[str] = COMPILED) -> list[str]:
    """``Base.member`` for every member of a compiled base that ``cls`` (an interpreted class) redefines."""
    if cls.__module__ in compiled:
        return []
    own = (set(vars(cls)) | set(vars(cls).get("__annotations__", {}))) - IGNORED
    own |= _source_members(cls.__module__, cls.__qualname__) if cls.__module__ in sys.modules else set()
    found = []
    for base in cls.__mro__[1:]:
        if base.__module__ not in compiled:
            continue
        found += [f"{base.__module__}.{base.__qualname__}.{name}" for name in sorted(own & _members(base) - IGNORED)]
    return found


def _classes() -> list[type]:
    found = []
    for name in _teesim_modules():
        module = importlib.import_module(name)
        found += [c for c in vars(module).values() if isinstance(c, type) and c.__module__ == name]
    return found


def test_the_walk_sees_the_package_and_the_compiled_modules() -> None:
    modules = _teesim_modules()
    assert set(native.MODULES) <= set(modules)
    assert {"teesim.serve.cli", "teesim.kubelet.server", "teesim.strategies.base"} <= set(modules)
    names = {f"{c.__module__}.{c.__qualname__}" for c in _classes()}
    assert {"teesim.serve.strategy.ServedStrategy", "teesim.kubelet.server.Kubelet"} <= names
    assert len(names) > 80


def test_no_interpreted_class_of_teesim_overrides_a_member_of_a_compiled_one() -> None:
    problems = {f"{c.__module__}.{c.__qualname__}": found for c in _classes() if (found := overrides(c))}
    assert not problems, (
        "interpreted classes redefine members of compiled (teesim._native.MODULES) ones; compiled code would "
        f"not see them: pass a collaborator in or compile the subclass too: {problems}"
    )


def test_the_check_catches_an_override_of_any_kind() -> None:
    """The check itself fails on what it must refuse: a class attribute, a method, an annotation, a
    ``self.`` attribute, through an intermediate class too."""
    from teesim.engine.clock import VirtualClock
    from teesim.sim.simulation import Simulation

    namespace = {"__module__": "tests.probe"}
    attribute = type("Attr", (Simulation,), {**namespace, "node_kubelet": None})
    method = type("Method", (VirtualClock,), {**namespace, "run": lambda self, until, after=None: None})
    annotated = type("Annotated", (VirtualClock,), {**namespace, "__annotations__": {"now": "float"}})
    fine = type("Fine", (VirtualClock,), {**namespace, "extra": lambda self: None})
    compiled = COMPILED
    assert overrides(attribute, compiled) == ["teesim.sim.simulation.Simulation.node_kubelet"]
    assert overrides(method, compiled) == ["teesim.engine.clock.VirtualClock.run"]
    assert overrides(annotated, compiled) == ["teesim.engine.clock.VirtualClock.now"]
    assert overrides(fine, compiled) == []
    # The instance attributes of a compiled class count as its members (found in its source).
    assert {"clock", "strategy", "nodes"} <= _members(Simulation)


@pytest.mark.skipif(native.status()["build"] != "native", reason="the source build is running")
def test_compiled_classes_with_no_interpreted_subclass_refuse_one() -> None:
    """In the native build, an interpreted subclass of the classes teesim serve used to subclass from source
    cannot even be instantiated (mypyc: "interpreted classes cannot inherit from compiled")."""
    from teesim.engine.clock import VirtualClock
    from teesim.sim.node_kubelet import NodeKubelet
    from teesim.sim.simulation import Simulation

    for base in (Simulation, NodeKubelet, VirtualClock):
        probe = type("Probe", (base,), {"__module__": "tests.probe"})
        with pytest.raises(TypeError, match="interpreted classes cannot inherit from compiled"):
            probe.__new__(probe)
