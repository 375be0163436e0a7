"""``teesim serve --root``: only what serve recorded creating is ever removed; any root it cannot prove is
its own is refused with exit 2, naming the file, and left exactly as it was (issue 27: a root with a
``teesim-serve.json`` serve could not read lost its ``etc/``)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from teesim.cli import main
from teesim.serve.root import MANIFEST, SERVE_TOPS, prepare_root

SHORT = Path(__file__).resolve().parents[1] / "external_plugins" / "serve-short.yaml"
TOPS = ["dev", "etc", "proc", "sys", "var"]


def _snapshot(root: Path) -> dict[str, str]:
    """Every path under ``root`` (links not followed) and what it is."""
    seen = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            if path.is_symlink():
                seen[str(path.relative_to(root))] = f"link:{os.readlink(path)}"
            else:
                seen[str(path.relative_to(root))] = "dir" if path.is_dir() else path.read_bytes().hex()
    return seen


def _hostile(root: Path) -> None:
    """What a real host's / holds: serve must never remove any of it."""
    for rel in ("etc/passwd", "sys/kernel/notes", "proc/1/status", "dev/null-ish", "var/lib/kubelet/config.yaml"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("someone else's\n", encoding="utf-8")


def _previous_run(root: Path) -> dict:
    prepare_root(root, TOPS)
    (root / "sys/fs/cgroup/machine.slice").mkdir(parents=True)
    (root / "teesim-serve.json").write_text('{"state": "done"}', encoding="utf-8")
    return json.loads((root / MANIFEST).read_text(encoding="utf-8"))


def test_a_new_or_empty_root_gets_the_tree_and_a_manifest_of_it(tmp_path):
    prepare_root(tmp_path / "new" / "root", TOPS)
    manifest = json.loads((tmp_path / "new" / "root" / MANIFEST).read_text(encoding="utf-8"))
    assert sorted(manifest["created"]) == TOPS
    assert manifest["written_by"] == "teesim serve"
    assert sorted(p.name for p in (tmp_path / "new" / "root").iterdir()) == sorted([*TOPS, MANIFEST])


def test_a_previous_runs_root_is_cleaned_and_reused(tmp_path):
    before = _previous_run(tmp_path)
    prepare_root(tmp_path, TOPS)
    assert not (tmp_path / "sys/fs").exists()
    assert (tmp_path / "teesim-serve.json").exists()  # replaced by the run's state, not removed
    after = json.loads((tmp_path / MANIFEST).read_text(encoding="utf-8"))
    assert sorted(after["created"]) == sorted(before["created"])


def _garble(text: str):
    return lambda root: (root / MANIFEST).write_text(text, encoding="utf-8")


def _edit(change):
    def apply(root: Path) -> None:
        data = json.loads((root / MANIFEST).read_text(encoding="utf-8"))
        change(data)
        (root / MANIFEST).write_text(json.dumps(data), encoding="utf-8")

    return apply


def _replace_dir(name: str):
    def apply(root: Path) -> None:
        # Someone else's directory of the same name (made while serve's still exists: another inode number).
        (root / name).rename(root.parent / f"gone-{name}")
        (root / name).mkdir()
        (root / name / "theirs").write_text("x", encoding="utf-8")

    return apply


def _link(name: str, target: str):
    def apply(root: Path) -> None:
        shutil.rmtree(root / name)
        (root / name).symlink_to(target)

    return apply


def _manifest_link(root: Path) -> None:
    real = root.parent / "elsewhere.json"
    (root / MANIFEST).rename(real)
    (root / MANIFEST).symlink_to(real)


def _manifest_dir(root: Path) -> None:
    (root / MANIFEST).unlink()
    (root / MANIFEST).mkdir()


def _unreadable(root: Path) -> None:
    (root / MANIFEST).write_bytes(b"\xff\xfe garbage")


HOSTILE = {
    "garbled": (_garble("{not json"), "is unreadable"),
    "binary": (_unreadable, "is unreadable"),
    "a list": (_garble("[]"), "is not a manifest teesim serve wrote"),
    "an extra key": (_edit(lambda d: d.update(extra=1)), "is not a manifest teesim serve wrote"),
    "another writer": (_edit(lambda d: d.update(written_by="x")), "is not a manifest teesim serve wrote"),
    "copied from another root": (_edit(lambda d: d.update(root=[0, 0])), "written for another directory"),
    "lists a path serve never creates": (_edit(lambda d: d["created"].update(lib=[0, 0])), "'lib', which teesim"),
    "lists a path outside": (_edit(lambda d: d["created"].update({"../etc": [0, 0]})), "'../etc', which teesim"),
    "lists an absolute path": (_edit(lambda d: d["created"].update({"/etc": [0, 0]})), "'/etc', which teesim"),
    "no inode": (_edit(lambda d: d["created"].update(etc="x")), "'etc' has no device and inode"),
    "someone else's etc": (_replace_dir("etc"), "etc is not the directory teesim serve created (device"),
    "sys links out of the root": (_link("sys", "/"), "sys is not the directory teesim serve created (now a link"),
    "var links to another dir": (_link("var", "/var"), "var is not the directory teesim serve created (now a link"),
    "the manifest is a link": (_manifest_link, "is not a regular file"),
    "the manifest is a directory": (_manifest_dir, "is not a regular file"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_root_serve_cannot_prove_is_its_own_is_refused_and_left_alone(tmp_path, case):
    root = tmp_path / "root"
    _previous_run(root)
    _hostile(root)  # written into the directories the manifest lists: still refused when the proof fails
    change, message = HOSTILE[case]
    change(root)
    before = _snapshot(root)
    with pytest.raises(ValueError, match="serve removes only what its own manifest proves") as info:
        prepare_root(root, TOPS)
    assert message in str(info.value)
    assert _snapshot(root) == before


@pytest.mark.parametrize("state", ["garbled {", '{"state": "done"}'])
def test_a_host_like_root_with_only_a_state_file_is_refused_and_kept(capsys, state):
    """The issue's case: teesim-serve.json (unreadable to serve, or well-formed) beside etc/, sys, proc,
    dev and var/lib/kubelet: no manifest, nothing removed, exit 2 naming the file."""
    root = Path(tempfile.mkdtemp(prefix="ts-", dir="/tmp"))  # Unix socket paths stay short
    try:
        _hostile(root)
        (root / "teesim-serve.json").write_text(state, encoding="utf-8")
        before = _snapshot(root)
        assert main(["serve", str(SHORT), "--root", str(root), "--compare", "none"]) == 2
        err = capsys.readouterr().err
        assert f"no {root.resolve() / MANIFEST}" in err
        assert _snapshot(root) == before
    finally:
        shutil.rmtree(root)


def test_a_file_of_someone_elses_beside_a_previous_run_is_refused(tmp_path):
    _previous_run(tmp_path)
    (tmp_path / "notes.txt").write_text("mine\n", encoding="utf-8")
    before = _snapshot(tmp_path)
    with pytest.raises(ValueError, match=r"notes\.txt was not created by teesim serve"):
        prepare_root(tmp_path, TOPS)
    assert _snapshot(tmp_path) == before


def test_a_not_empty_root_without_a_manifest_is_refused(tmp_path):
    (tmp_path / "keep.txt").write_text("x", encoding="utf-8")
    with pytest.raises(ValueError, match="not empty and no teesim serve run left it"):
        prepare_root(tmp_path, TOPS)
    assert (tmp_path / "keep.txt").read_text(encoding="utf-8") == "x"


def test_what_serve_creates_is_known():
    assert set(TOPS) == SERVE_TOPS
    with pytest.raises(ValueError, match=r"not in teesim\.serve\.root\.SERVE_TOPS"):
        prepare_root(Path("/nonexistent-never-created"), ["lib"])
