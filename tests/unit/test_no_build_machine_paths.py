"""No absolute path of a build machine in the repository: every clone and every installed copy must work the same.

A path such as ``/work/shared/...`` or ``/home/<user>/...`` works on the machine that wrote it and nowhere else (a
fallback to it hides a missing fixture). Paths on the hosts the collection manages (``/opt/intel/...``,
``/var/tmp/...``) and in examples (``/tmp/node``) are the product's own and are allowed.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# Home and work directories of build machines, pytest's and macOS' temporary directories.
BUILD_MACHINE_PATH = re.compile(
    r"(?<![\w.~-])(?:/work/|/root/|/home/[a-z_][\w.-]*/|/Users/[^/\s]+/|/tmp/pytest-of-|/private/var/folders/)"
)


def repository_files() -> list[Path]:
    """The files git tracks plus those it would add (untracked, not ignored): what a commit would carry."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=REPO,
            capture_output=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError) as error:
        pytest.skip(f"not a git checkout: {error}")
    return [REPO / name for name in sorted(set(listed.decode().split("\0"))) if name]


def offending_lines(text: str, extra: tuple[str, ...] = ()) -> list[str]:
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        if BUILD_MACHINE_PATH.search(line) or any(path in line for path in extra):
            found.append(f"{number}: {line.strip()[:160]}")
    return found


def test_the_pattern_catches_build_machine_paths_and_spares_host_paths():
    assert offending_lines('Path("/work/shared/reference")') and offending_lines("cd /root/.cache/x")
    assert offending_lines("see /home/alice/src/tee") and offending_lines("/tmp/pytest-of-root/pytest-3/x")
    assert not offending_lines("/opt/intel/tdx-qgs /var/tmp/dcap-packages/ /tmp/node ~/.cache/confidential-tee/")
    assert offending_lines("x = '/srv/build/repo/tests'", extra=("/srv/build/repo",))


def test_no_file_in_the_repository_names_a_build_machine_path():
    # This checkout's own location too, wherever it is.
    here = (str(REPO),)
    problems = []
    for path in repository_files():
        if not path.is_file() or path.is_symlink() or path == Path(__file__).resolve():
            continue  # this file names the patterns it looks for
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # binary (PNG, ...): no paths to read
        problems += [f"{path.relative_to(REPO)}:{line}" for line in offending_lines(text, here)]
    assert not problems, "absolute paths of a build machine:\n" + "\n".join(problems)
