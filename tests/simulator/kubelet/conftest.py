"""Real kubelet sockets under a short /tmp directory (Unix socket paths are limited to 107 bytes)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from teesim.kubelet.server import Kubelet


@pytest.fixture
def node_root() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="ts-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def kubelet(node_root: Path) -> Iterator[Kubelet]:
    k = Kubelet(node_root)
    k.start()
    yield k
    k.stop()
