# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""The files the key agent (``plugins/module_utils/agent``) needs to run outside Ansible: its own package, every
collection module it imports (followed to the end, read from the source, never listed by hand) and the file its
``--version`` reads (``MANIFEST.json`` of an installed collection, else ``galaxy.yml`` of a checkout).

Both deployments copy exactly this set under ``<dest>/ansible_collections/confidential/tee/``: the
``tee_key_agent`` role onto a host, ``make image`` into the image (``scripts/agent_image.py``). Python finds
``ansible_collections`` as a namespace package, so no ``__init__.py`` is made up where the collection has none.

Controller side; standard library only.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = "ansible_collections.confidential.tee."
AGENT = "plugins/module_utils/agent"
VERSION_FILES = ("MANIFEST.json", "galaxy.yml")
ENTRY_MODULE = PACKAGE + AGENT.replace("/", ".") + ".cli"


class AgentFilesError(Exception):
    """The collection holds no agent, or one of its imports does not resolve to a file of the collection."""


def _imported(tree: ast.AST) -> list[tuple[str, list[str]]]:
    """``(module, names)`` of every import of the collection in a module, function-level ones included."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith(PACKAGE):
            found.append((node.module, [alias.name for alias in node.names]))
        elif isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names if alias.name.startswith(PACKAGE)]
    return found


def _resolve(root: Path, module: str, names: list[str], where: str) -> list[str]:
    """The collection files an import brings in: the module, or the package's ``__init__.py`` and named submodules."""
    base = module[len(PACKAGE) :].replace(".", "/")
    if (root / (base + ".py")).is_file():
        return [base + ".py"]
    if not (root / base).is_dir():
        raise AgentFilesError("%s imports %s, which is no file of the collection at %s" % (where, module, root))
    files = [base + "/__init__.py"] if (root / base / "__init__.py").is_file() else []
    return files + [base + "/" + n + ".py" for n in names if (root / base / (n + ".py")).is_file()]


def agent_files(root) -> list[str]:
    """Paths relative to the collection ``root`` of every file the agent needs, sorted."""
    root = Path(root)
    package = root / AGENT
    if not (package / "cli.py").is_file():
        raise AgentFilesError("%s has no key agent (%s/cli.py): not a confidential.tee collection" % (root, AGENT))
    todo = sorted(str(p.relative_to(root)) for p in package.glob("*.py"))
    seen: set[str] = set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        tree = ast.parse((root / path).read_text(encoding="utf-8"), filename=path)
        for module, names in _imported(tree):
            todo += [found for found in _resolve(root, module, names, path) if found not in seen]
    version = next((name for name in VERSION_FILES if (root / name).is_file()), None)
    if version is None:
        raise AgentFilesError("%s has neither MANIFEST.json nor galaxy.yml: the agent could not say its version" % root)
    return [*sorted(seen), version]


def host_files(root, dest: str) -> list[dict]:
    """``confidential.tee.host_files`` entries installing :func:`agent_files` under ``dest`` (0644, root-owned)."""
    target = dest.rstrip("/") + "/ansible_collections/confidential/tee/"
    return [
        {"path": target + path, "content": (Path(root) / path).read_text(encoding="utf-8"), "mode": "0644"}
        for path in agent_files(root)
    ]
