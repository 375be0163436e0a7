"""host_reader: the one reader of host files. Regular files only, bounded, links resolved inside host_root."""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path

import pytest
from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import (
    MAX_SYMLINKS,
    HostReader,
    Problem,
)
from pyfakefs.helpers import set_uid


@pytest.fixture
def alarm():
    """Fail instead of hanging forever when a read blocks (a FIFO opened for reading waits for a writer)."""

    def expired(_signum, _frame):
        raise AssertionError("the read blocked")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(10)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def write(root: Path, rel: str, data: bytes | str = b"x\n") -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return path


def test_regular_file_is_read_whole(tmp_path):
    write(tmp_path, "proc/cmdline", "ro quiet\n")
    reader = HostReader(str(tmp_path))
    result = reader.read("/proc/cmdline")
    assert (result.data, result.exists, result.problem, result.ok) == (b"ro quiet\n", True, None, True)
    assert result.path == f"{tmp_path}/proc/cmdline"
    assert reader.problems == []


def test_missing_file_is_a_fact_and_a_problem_only_when_expected(tmp_path):
    reader = HostReader(str(tmp_path))
    assert reader.read("proc/cmdline").exists is False and reader.problems == []
    result = reader.read("proc/cmdline", expected=True)
    assert result.problem == Problem(f"{tmp_path}/proc/cmdline", "missing")
    assert reader.problems == [result.problem]


@pytest.mark.parametrize("rel", ["proc/cmdline", "sys/fs/cgroup/misc.capacity", "sys/fs/cgroup/misc.current"])
def test_fifo_is_refused_without_blocking(tmp_path, alarm, rel):
    path = tmp_path / rel
    path.parent.mkdir(parents=True)
    os.mkfifo(path)
    result = HostReader(str(tmp_path)).read(rel)
    assert result.data is None
    assert result.problem.problem == "is a FIFO (named pipe), not a regular file: not opened"


def test_fifo_swapped_in_after_the_type_check_does_not_block(tmp_path, alarm, monkeypatch):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    write(tmp_path, "file", "x")
    real_stat = os.stat
    # The stat sees a regular file, the open gets the FIFO: O_NONBLOCK and the fstat check must catch it.
    monkeypatch.setattr(os, "stat", lambda path, *a, **k: real_stat(str(tmp_path / "file")))
    monkeypatch.setattr(HostReader, "resolve", lambda self, rel, follow_last=True: str(fifo))
    result = HostReader(str(tmp_path)).read("file")
    assert result.data is None and "became a FIFO" in result.problem.problem


def test_directories_sockets_and_devices_are_not_opened(tmp_path):
    (tmp_path / "dir").mkdir()
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(tmp_path / "sock"))
        reader = HostReader(str(tmp_path))
        assert reader.read("dir").problem.problem.startswith("is a directory")
        assert reader.read("sock").problem.problem.startswith("is a socket")
        assert reader.is_socket("sock") is True and reader.is_socket("dir") is False
    # /dev/zero would never end: a character device is refused by type.
    assert HostReader("/").read("/dev/zero").problem.problem.startswith("is a character device")


def test_oversized_file_is_refused_or_truncated_with_a_warning(tmp_path):
    write(tmp_path, "big", b"a" * 100)
    reader = HostReader(str(tmp_path))
    refused = reader.read("big", limit=10)
    assert refused.data is None and refused.problem.problem.startswith("larger than 10 bytes")
    kept = reader.read("big", limit=10, truncate=True)
    assert kept.data == b"a" * 10 and kept.truncated and "only the first 10" in kept.problem.problem
    assert len(reader.problems) == 2


def test_unreadable_file_and_directory_are_problems(fs):
    fs.create_file("/host/secret", contents="x")
    fs.create_dir("/host/closed")
    os.chmod("/host/secret", 0)
    os.chmod("/host/closed", 0)
    set_uid(1000)  # root would read them anyway
    try:
        reader = HostReader("/host")
        assert reader.read("secret").problem.problem == "unreadable: Permission denied"
        assert reader.listdir("closed") is None
    finally:
        set_uid(0)
    assert reader.problems[-1].problem == "unreadable directory: Permission denied"


def test_absolute_symlinks_resolve_inside_host_root(tmp_path):
    write(tmp_path, "srv/grub", "inside\n")
    (tmp_path / "etc/default").mkdir(parents=True)
    (tmp_path / "etc/default/grub").symlink_to("/srv/grub")  # absolute: means <host_root>/srv/grub
    (tmp_path / "etc/up").symlink_to("../../../../../srv")  # ".." never climbs out of host_root
    reader = HostReader(str(tmp_path))
    assert reader.resolve("etc/default/grub") == f"{tmp_path}/srv/grub"
    assert reader.read("etc/default/grub").data == b"inside\n"
    assert reader.read("etc/up/grub").data == b"inside\n"
    assert reader.resolve("etc/default/grub", follow_last=False) == f"{tmp_path}/etc/default/grub"


def test_symlink_loops_are_a_problem_not_a_hang(tmp_path):
    (tmp_path / "a").symlink_to("/b")
    (tmp_path / "b").symlink_to("/a")
    reader = HostReader(str(tmp_path))
    with pytest.raises(OSError, match="symbolic links"):
        reader.resolve("a")
    assert "too many levels of symbolic links" in reader.read("a").problem.problem
    assert MAX_SYMLINKS == 40


def test_listing_and_metadata(tmp_path):
    write(tmp_path, "d/b")
    write(tmp_path, "d/a")
    reader = HostReader(str(tmp_path))
    assert reader.listdir("d") == ["a", "b"] and reader.listdir("missing") == []
    assert reader.isdir("d") and reader.isfile("d/a") and reader.exists("d/a")
    assert reader.stat("missing") is False and reader.exists("missing") is False
    assert reader.is_executable("d/a") is False
    (tmp_path / "d/a").chmod(0o755)
    assert reader.is_executable("d/a") is True


def test_text_replaces_bytes_that_are_not_utf8(tmp_path):
    write(tmp_path, "f", b"caf\xe9\n")
    assert HostReader(str(tmp_path)).read_text("f") == "caf\ufffd\n"


# ---------------------------------------------------------------------------------------------------
# read_at: one register of the msr and cpuid character devices (or a regular file standing in for one)
# ---------------------------------------------------------------------------------------------------


def test_read_at_reads_exactly_size_bytes_at_the_offset_of_a_sparse_file(tmp_path):
    path = tmp_path / "dev/cpu/0/cpuid"
    path.parent.mkdir(parents=True)
    with open(path, "wb") as handle:
        handle.seek(0x8000001F)
        handle.write(bytes(range(16)) + b"tail")
    result = HostReader(str(tmp_path)).read_at("dev/cpu/0/cpuid", 0x8000001F, 16)
    assert (result.data, result.problem) == (bytes(range(16)), None)


def test_read_at_a_short_file_is_a_problem_not_a_partial_value(tmp_path):
    write(tmp_path, "dev/cpu/0/msr", b"\x00" * 0x87 + b"\x01\x02")
    reader = HostReader(str(tmp_path))
    result = reader.read_at("dev/cpu/0/msr", 0x87, 8)
    assert result.data is None and result.problem.problem == "only 2 of 8 bytes at offset 0x87"
    assert reader.problems == [result.problem]


def test_read_at_a_missing_file_is_a_fact(tmp_path):
    reader = HostReader(str(tmp_path))
    result = reader.read_at("dev/cpu/0/msr", 0x87, 8)
    assert (result.exists, result.data, result.problem, reader.problems) == (False, None, None, [])


def test_read_at_opens_a_character_device(tmp_path):
    # /dev/null is a real character device: it opens, and a read returns nothing (a short read).
    (tmp_path / "dev/cpu/0").mkdir(parents=True)
    (tmp_path / "dev/cpu/0/msr").symlink_to("/dev/null")
    result = HostReader("/").read_at(str(tmp_path / "dev/cpu/0/msr"), 0x87, 8, record=False)
    assert result.problem.problem == "only 0 of 8 bytes at offset 0x87"


def test_read_at_refuses_a_fifo_without_blocking(tmp_path, alarm):
    (tmp_path / "dev/cpu/0").mkdir(parents=True)
    os.mkfifo(tmp_path / "dev/cpu/0/msr")
    result = HostReader(str(tmp_path)).read_at("dev/cpu/0/msr", 0x87, 8)
    assert result.data is None
    assert result.problem.problem == "is a FIFO (named pipe), not a register file: not opened"


def test_read_at_an_unopenable_file_says_why(tmp_path):
    path = write(tmp_path, "dev/cpu/0/msr", b"\x00" * 0x90)
    path.chmod(0)
    if os.geteuid() == 0:
        pytest.skip("root opens a mode-000 file")
    result = HostReader(str(tmp_path)).read_at("dev/cpu/0/msr", 0x87, 8)
    assert result.problem.problem.startswith("cannot be opened: Permission denied")
