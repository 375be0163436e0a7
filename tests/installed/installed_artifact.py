"""The collection as its users get it (tests/installed/conftest.py builds and installs it once per session):

* the artifact ``ansible-galaxy collection build`` makes from this checkout;
* installed with its declared dependencies (``galaxy.yml`` ``dependencies``, resolved by ``ansible-galaxy`` itself,
  offline: Galaxy is unreachable, so each dependency is given as the ``ansible`` PyPI package's copy of it, a
  collection directory with its MANIFEST.json) into an empty collections path;
* run by a virtualenv that holds ``ansible-core`` and nothing else (cached under ``~/.cache/confidential-tee/``),
  from a working directory outside the checkout, with no trace of the checkout in the environment.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DEV_BIN = Path(sys.executable).parent
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "confidential-tee"


def core_only_venv(core: str | None = None, python: str = sys.executable) -> Path:
    """A virtualenv of ``python`` with ansible-core ``core`` only (default: the version the tests run), installed from
    PyPI, built atomically and cached by both versions, so that a warm run creates nothing."""
    core = core or version("ansible-core")
    target = CACHE / f"ansible-core-only-{core}-py{python_version(python)}"
    if (target / "bin" / "ansible-playbook").exists():
        if (target / "bin" / "python").exists():
            return target
        shutil.rmtree(
            target, ignore_errors=True
        )  # its interpreter was removed (a pyenv version uninstalled): build it again
    CACHE.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=CACHE))
    subprocess.run([python, "-m", "venv", str(building)], check=True)
    pip = [str(building / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, f"ansible-core=={core}"], check=True, timeout=900)
    # A venv records its own path in its scripts' first lines: point them at the final place, then rename.
    _rewrite_venv_paths(building, building, target)
    try:
        building.rename(target)
    except OSError:
        shutil.rmtree(building, ignore_errors=True)  # another session finished first: use theirs
        if not (target / "bin" / "ansible-playbook").exists():
            raise
    return target


def python_version(python: str) -> str:
    """``X.Y`` of the interpreter ``python``."""
    if python == sys.executable:
        return f"{sys.version_info.major}.{sys.version_info.minor}"
    completed = subprocess.run(
        [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], capture_output=True, text=True, check=True
    )
    return completed.stdout.strip()


def _rewrite_venv_paths(venv: Path, old: Path, new: Path) -> None:
    """Point the scripts' shebang lines at the venv's final place ``new`` (it is built at ``old``)."""
    for script in (venv / "bin").iterdir():
        if script.is_file() and not script.is_symlink():
            data = script.read_bytes()
            if data.startswith(b"#!") and str(old).encode() in data[:512]:
                script.write_bytes(data.replace(str(old).encode(), str(new).encode(), 1))


def galaxy_dependencies() -> dict[str, str]:
    return yaml.safe_load((REPO / "galaxy.yml").read_text())["dependencies"] or {}


def bundled_collection(fqcn: str) -> Path:
    """The ``ansible`` PyPI package's installed copy of ``fqcn`` (what Galaxy would give, same MANIFEST)."""
    import ansible_collections  # the dev venv's, where the ansible package put its collections

    for base in ansible_collections.__path__:
        found = Path(base, *fqcn.split("."))
        if (found / "MANIFEST.json").is_file():
            return found
    pytest.fail(f"{fqcn} is a declared dependency but the ansible package of this venv has no copy of it")


def tree_fingerprint(root: Path) -> dict[str, tuple[int, str]]:
    """Every path under ``root`` with its mode and content hash (directories: mode only)."""
    found = {}
    for path in sorted(root.rglob("*")):
        stat = path.lstat()
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() and not path.is_symlink() else ""
        found[str(path.relative_to(root))] = (stat.st_mode, digest)
    return found


@dataclass
class Installed:
    work: Path
    tarball: Path
    collections: Path
    copy: Path
    venv: Path
    config: Path

    @property
    def bin(self) -> Path:
        return self.venv / "bin"

    def env(self, **extra: str) -> dict[str, str]:
        """An operator's environment: the core-only venv first on PATH, only the installed collections path."""
        inherited = {
            k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "VIRTUAL_ENV")) and k != "PYTHONPATH"
        }
        return {
            **inherited,
            "PATH": f"{self.bin}:{inherited.get('PATH', '')}",
            "ANSIBLE_CONFIG": str(self.config),
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_LOCALHOST_WARNING": "false",
            **extra,
        }

    def run(self, command: list[str] | str, cwd: Path, timeout: int = 600, **extra_env: str):
        completed = subprocess.run(
            command,
            shell=isinstance(command, str),
            env=self.env(**extra_env),
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        completed.flat = " ".join((completed.stdout + completed.stderr).split())  # type: ignore[attr-defined]
        return completed
