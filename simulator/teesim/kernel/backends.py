"""Where a node's files live: a real directory or a pyfakefs filesystem, with identical bytes.

A real directory is what out-of-process readers need (``ansible-playbook`` with ``host_root``, the gRPC
device plugins); pyfakefs keeps in-process tests fast. Both receive the same ``{path: text}`` mapping
from :meth:`teesim.kernel.node.Node.files` and only rewrite files whose text changed. The real
directory writes atomically (temporary file in the same directory + ``os.replace``), so a concurrent
reader sees the old or the new text, never half of it, like a read of a seq_file.

A "sysfs unreadable" fault replaces a file by a directory of the same name: reading it then fails with
``EISDIR`` even for root (``chmod 000`` does not stop root).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from pyfakefs.fake_filesystem import FakeFilesystem


class Backend(Protocol):
    """The few operations the simulator needs from a filesystem."""

    root: str

    def write(self, relpath: str, data: bytes) -> None: ...
    def read(self, relpath: str) -> bytes: ...
    def remove(self, relpath: str) -> None: ...
    def make_unreadable(self, relpath: str) -> None: ...
    def path(self, relpath: str) -> str: ...


class RealDirBackend:
    """Files under a real directory ``root``."""

    def __init__(self, root: str | os.PathLike[str]):
        self.root = os.path.abspath(os.fspath(root))

    def path(self, relpath: str) -> str:
        return os.path.join(self.root, relpath)

    def write(self, relpath: str, data: bytes) -> None:
        target = self.path(relpath)
        directory = os.path.dirname(target)
        os.makedirs(directory, exist_ok=True)
        if os.path.isdir(target) and not os.path.islink(target):
            shutil.rmtree(target)
        fd, tmp = tempfile.mkstemp(prefix=".teesim-", dir=directory)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.replace(tmp, target)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise

    def read(self, relpath: str) -> bytes:
        with open(self.path(relpath), "rb") as handle:
            return handle.read()

    def remove(self, relpath: str) -> None:
        target = self.path(relpath)
        if os.path.isdir(target):
            shutil.rmtree(target)
        elif os.path.exists(target):
            os.unlink(target)
        # A removed cgroup leaves no empty directory behind (readers walk child directories).
        parent = os.path.dirname(target)
        while parent.startswith(self.root + os.sep) and os.path.isdir(parent) and not os.listdir(parent):
            os.rmdir(parent)
            parent = os.path.dirname(parent)

    def make_unreadable(self, relpath: str) -> None:
        self.remove(relpath)
        os.makedirs(self.path(relpath), exist_ok=True)

    def write_at(self, relpath: str, offset: int, data: bytes) -> None:
        """A register file: ``data`` at ``offset`` of a sparse file (the msr and cpuid devices' layout)."""
        target = self.path(relpath)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.pwrite(fd, data, offset)
        finally:
            os.close(fd)

    def symlink(self, relpath: str, target: str) -> None:
        link = self.path(relpath)
        os.makedirs(os.path.dirname(link), exist_ok=True)
        if os.path.lexists(link):
            os.unlink(link)
        os.symlink(target, link)


class FakeFsBackend:
    """Files in a pyfakefs ``FakeFilesystem`` (the object, so no patching is needed)."""

    def __init__(self, fs: FakeFilesystem, root: str = "/host"):
        self.fs = fs
        self.root = root

    def path(self, relpath: str) -> str:
        return self.fs.joinpaths(self.root, relpath)

    def write(self, relpath: str, data: bytes) -> None:
        target = self.path(relpath)
        if self.fs.exists(target):
            obj = self.fs.resolve(target)
            if obj.st_mode & 0o040000:
                self.fs.remove_object(target)
            else:
                obj.set_contents(data)
                return
        self.fs.create_file(target, contents=data)

    def read(self, relpath: str) -> bytes:
        contents = self.fs.resolve(self.path(relpath)).byte_contents
        return contents or b""

    def remove(self, relpath: str) -> None:
        target = self.path(relpath)
        if self.fs.exists(target):
            self.fs.remove_object(target)
        parent = self.fs.splitpath(target)[0]
        while parent.startswith(self.root + "/") and self.fs.isdir(parent) and not self.fs.listdir(parent):
            self.fs.remove_object(parent)
            parent = self.fs.splitpath(parent)[0]

    def make_unreadable(self, relpath: str) -> None:
        self.remove(relpath)
        self.fs.create_dir(self.path(relpath))


class NodeWriter:
    """Keeps a backend in step with a node's rendered files, writing only what changed."""

    def __init__(self, backend: Backend):
        self.backend = backend
        self._written: dict[str, bytes] = {}
        self.unreadable: set[str] = set()

    def sync(self, files: Mapping[str, str]) -> int:
        """Write changed files, remove vanished ones; returns the number of writes."""
        writes = 0
        for relpath, text in files.items():
            if relpath in self.unreadable:
                continue
            data = text.encode("ascii")
            if self._written.get(relpath) != data:
                self.backend.write(relpath, data)
                self._written[relpath] = data
                writes += 1
        for relpath in sorted(set(self._written) - set(files)):
            self.backend.remove(relpath)
            del self._written[relpath]
        return writes

    def break_file(self, relpath: str) -> None:
        """Fault: make ``relpath`` unreadable until :meth:`repair_file`."""
        self.unreadable.add(relpath)
        self.backend.make_unreadable(relpath)
        self._written.pop(relpath, None)

    def repair_file(self, relpath: str) -> None:
        self.unreadable.discard(relpath)
