"""``teesim node build`` writes a tree the collection's reader accepts."""

from __future__ import annotations

from pathlib import Path

import pytest
from teesim._collection import HostReader, read_misc_state
from teesim.cli import main


def test_node_build_current(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "node"
    assert main(["node", "build", "--capacity", "tdx=63", "--usage", "tdx=5", "--out", str(out)]) == 0
    assert "tdx 5/63" in capsys.readouterr().out
    assert (out / "sys/fs/cgroup/misc.capacity").read_text() == "tdx 63\n"
    assert (out / "sys/fs/cgroup/misc.current").read_text() == "tdx 5\n"
    assert (out / "sys/fs/cgroup/machine.slice/misc.current").read_text() == "tdx 5\n"
    state = read_misc_state(HostReader(str(out)))
    assert (state.resources["tdx"].capacity, state.resources["tdx"].current) == (63, 5)


def test_node_build_amd_old_and_no_misc(tmp_path: Path) -> None:
    assert (
        main(
            [
                "node",
                "build",
                "--vendor",
                "amd",
                "--profile",
                "old",
                "--usage",
                "snp=2",
                "--out",
                str(tmp_path / "a"),
            ]
        )
        == 0
    )
    state = read_misc_state(HostReader(str(tmp_path / "a")))
    assert state.resources["sev_es"].current == 2
    assert state.resources["sev_es"].current_is_lower_bound
    assert main(["node", "build", "--profile", "no-misc", "--out", str(tmp_path / "b")]) == 0
    assert not read_misc_state(HostReader(str(tmp_path / "b"))).layout.present


def test_node_build_errors_are_messages(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["node", "build", "--usage", "tdx=64", "--out", str(tmp_path / "x")]) == 2
    # KVM allocates the TDX KeyID before the misc charge: hardware exhaustion is ENOSPC (KVM_TDX_INIT_VM).
    assert "[Errno 28] tdx: cannot charge 64 to /machine.slice: no free TDX KeyID" in capsys.readouterr().err
    assert main(["node", "build", "--profile", "no-misc", "--usage", "tdx=1", "--out", str(tmp_path / "y")]) == 2
    assert "has no misc controller" in capsys.readouterr().err
    assert main(["node", "build", "--capacity", "sev=1", "--out", str(tmp_path / "z")]) == 2
    assert "use --vendor amd" in capsys.readouterr().err


def test_node_build_again_replaces_stale_cgroups(tmp_path: Path) -> None:
    assert main(["node", "build", "--usage", "tdx=2", "--usage-cgroup", "a.slice", "--out", str(tmp_path)]) == 0
    assert main(["node", "build", "--usage", "tdx=1", "--out", str(tmp_path)]) == 0
    assert not (tmp_path / "sys/fs/cgroup/a.slice").exists()
    state = read_misc_state(HostReader(str(tmp_path)), include_cgroups=True)
    assert [c.path for c in state.cgroups] == ["machine.slice"]
    assert state.resources["tdx"].current == 1


def test_node_build_registers_and_an_old_kernel_without_the_tdx_resource(tmp_path: Path) -> None:
    args = ["node", "build", "--profile", "old", "--no-tdx-misc", "--registers", "--capacity", "tdx=31"]
    assert main([*args, "--out", str(tmp_path)]) == 0
    with open(tmp_path / "dev/cpu/0/msr", "rb") as handle:
        handle.seek(0x87)
        assert int.from_bytes(handle.read(8), "little") == (32 << 32) | 31
    assert (tmp_path / "sys/fs/cgroup/misc.capacity").read_text() == ""
    assert main(["node", "build", "--kvm-tdx", "absent", "--out", str(tmp_path / "k")]) == 0
    assert not (tmp_path / "k/sys/module/kvm_intel/parameters/tdx").exists()


def test_node_build_with_ciphertext_hiding(tmp_path: Path) -> None:
    out = tmp_path / "snp"
    assert main(["node", "build", "--vendor", "amd", "--ciphertext-hiding-asids", "16", "--out", str(out)]) == 0
    assert (out / "sys/module/kvm_amd/parameters/ciphertext_hiding_asids").read_text() == "16\n"
    # KVM caps the value at the joint sev_es range and prints what it kept (-1u gives SNP everything).
    big = tmp_path / "big"
    assert main(["node", "build", "--vendor", "amd", "--ciphertext-hiding-asids", "4294967295", "--out", str(big)]) == 0
    assert (big / "sys/module/kvm_amd/parameters/ciphertext_hiding_asids").read_text() == "99\n"
