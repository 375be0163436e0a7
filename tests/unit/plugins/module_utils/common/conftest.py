"""What the toy tests share: two copies of the collection's code, and the files in which they differ."""

from __future__ import annotations

import filecmp
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[5]
# What a toy mode or a toy TEE may touch, and what runs it: the collection's code, its scripts and teesim.
COPIED = ("plugins", "scripts", "simulator")
SKIPPED = ("__pycache__", "build")


class ToyTrees:
    """``tree``: the copy a toy is added to, inside ``collections`` (an Ansible collections path);
    ``pristine``: an untouched copy to count the changed files against."""

    def __init__(self, base: Path) -> None:
        self.collections = base / "collections"
        self.tree = self.collections / "ansible_collections" / "confidential" / "tee"
        self.pristine = base / "pristine"
        for top in COPIED:
            shutil.copytree(ROOT / top, self.tree / top, ignore=_ignore)
            shutil.copytree(ROOT / top, self.pristine / top, ignore=_ignore)

    def changed(self) -> list[str]:
        """Files that differ or exist on one side only, relative to the trees' roots, sorted."""
        found: list[str] = []

        def walk(cmp: filecmp.dircmp, rel: Path) -> None:
            found.extend(str(rel / n) for n in cmp.diff_files + cmp.left_only + cmp.right_only)
            for name, sub in cmp.subdirs.items():
                walk(sub, rel / name)

        for top in COPIED:
            walk(filecmp.dircmp(self.pristine / top, self.tree / top, ignore=list(SKIPPED)), Path(top))
        return sorted(found)


def _ignore(_dir, names):
    """Build products are left out: the copies are run from source."""
    return [n for n in names if n in SKIPPED or n.endswith((".so", ".pyc"))]


@pytest.fixture
def toy_trees(tmp_path: Path) -> ToyTrees:
    return ToyTrees(tmp_path)
