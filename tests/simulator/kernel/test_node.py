"""Node trees: every profile renders, round-trips through the collection's reader, both backends agree."""

from __future__ import annotations

import errno
import struct
from pathlib import Path

import pytest
from pyfakefs.fake_filesystem import FakeFilesystem
from pyfakefs.fake_os import FakeOsModule
from teesim._collection import HostReader, read_misc_state
from teesim.kernel.backends import FakeFsBackend, NodeWriter, RealDirBackend
from teesim.kernel.node import Node, NodeSpec, PciDevice, parse_assignments
from teesim.kernel.profiles import CURRENT, NO_MISC, OLD, get_profile


def _busy_node(profile=CURRENT, vendor: str = "intel") -> Node:
    node = Node(NodeSpec(name="n1", profile=profile, vendor=vendor))
    misc = node.misc
    assert misc is not None
    resource = "tdx" if vendor == "intel" else "sev_es"
    misc.ensure_cgroup("kubepods.slice/pod-a")
    misc.ensure_cgroup("machine.slice/vm-1")
    misc.try_charge("kubepods.slice/pod-a", resource, 4)
    misc.try_charge("machine.slice/vm-1", resource, 2)
    if vendor == "amd":
        misc.try_charge("machine.slice/vm-1", "sev", 1)
    return node


def test_intel_current_tree_exact_files() -> None:
    files = _busy_node().files()
    assert files["sys/fs/cgroup/misc.capacity"] == "tdx 63\n"
    assert files["sys/fs/cgroup/misc.current"] == "tdx 6\n"
    assert files["sys/fs/cgroup/misc.peak"] == "tdx 6\n"
    assert files["sys/fs/cgroup/cgroup.controllers"].split()[-1] == "misc"
    assert files["sys/module/kvm_intel/parameters/tdx"] == "Y\n"
    assert files["proc/sys/kernel/osrelease"] == "6.16.0-teesim\n"
    assert "kvm_intel.tdx=1" in files["proc/cmdline"]
    assert " tdx_host_platform" in files["proc/cpuinfo"]
    assert files["proc/cpuinfo"].count("processor\t:") == 4
    assert "dev/vhost-vsock" in files
    assert not any(p.startswith("sys/module/kvm_amd") for p in files)


def test_amd_old_tree_exact_files() -> None:
    files = _busy_node(OLD, "amd").files()
    assert files["sys/fs/cgroup/misc.capacity"] == "sev 410\nsev_es 99\n"
    assert "sys/fs/cgroup/misc.current" not in files
    assert "sys/fs/cgroup/misc.peak" not in files
    assert files["sys/fs/cgroup/machine.slice/vm-1/misc.current"] == "sev 1\nsev_es 2\n"
    assert files["sys/fs/cgroup/kubepods.slice/misc.current"] == "sev 0\nsev_es 4\n"
    assert files["sys/module/kvm_amd/parameters/sev_snp"] == "Y\n"
    assert "dev/sev" in files
    assert " sev_snp" in files["proc/cpuinfo"]


def test_no_misc_tree_has_no_misc_files() -> None:
    node = Node(NodeSpec(profile=NO_MISC))
    files = node.files()
    assert node.misc is None
    assert not any("misc." in p for p in files)
    assert "misc" not in files["sys/fs/cgroup/cgroup.controllers"].split()


@pytest.mark.parametrize(("profile", "vendor"), [(CURRENT, "intel"), (OLD, "intel"), (CURRENT, "amd"), (OLD, "amd")])
def test_round_trip_through_collection_reader(tmp_path: Path, profile, vendor: str) -> None:
    node = _busy_node(profile, vendor)
    NodeWriter(RealDirBackend(tmp_path)).sync(node.files())
    state = read_misc_state(HostReader(str(tmp_path)), include_cgroups=True)
    assert not state.issues, [i.describe() for i in state.issues]
    misc = node.misc
    assert misc is not None
    for name in misc.resources():
        res = state.resources[name]
        assert res.capacity == misc.capacity(name)
        assert res.current == misc.usage(name)
        assert res.peak == (misc.peak(name) if profile.peak else None)
        assert res.current_source == ("root" if profile.root_current else "children_sum")
    by_path = {c.path: c for c in state.cgroups}
    assert by_path["machine.slice/vm-1"].current == {n: misc.usage(n, "machine.slice/vm-1") for n in misc.resources()}


def test_round_trip_no_misc_reports_absent(tmp_path: Path) -> None:
    NodeWriter(RealDirBackend(tmp_path)).sync(Node(NodeSpec(profile=NO_MISC)).files())
    state = read_misc_state(HostReader(str(tmp_path)))
    assert not state.layout.present
    assert "misc cgroup controller is not available" in state.layout.reason


def _tree_bytes(read, paths) -> dict[str, bytes]:
    return {p: read(p) for p in paths}


def test_fakefs_and_real_dir_hold_identical_bytes(tmp_path: Path) -> None:
    node = _busy_node(CURRENT, "amd")
    fs = FakeFilesystem()
    fake = FakeFsBackend(fs, "/host")
    real = RealDirBackend(tmp_path)
    writers = [NodeWriter(fake), NodeWriter(real)]
    for writer in writers:
        writer.sync(node.files())
    misc = node.misc
    assert misc is not None
    misc.uncharge("machine.slice/vm-1", "sev_es", 2)
    misc.uncharge("machine.slice/vm-1", "sev", 1)
    misc.remove_cgroup("machine.slice/vm-1")
    for writer in writers:
        assert writer.sync(node.files()) > 0
    files = node.files()
    assert _tree_bytes(fake.read, files) == _tree_bytes(real.read, files)
    assert _tree_bytes(real.read, files) == {p: t.encode() for p, t in files.items()}
    real_listing = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    fake_listing = sorted(
        str(Path(dirpath, name).relative_to("/host"))
        for dirpath, dirnames, filenames in FakeOsModule(fs).walk("/host")
        for name in dirnames + filenames
    )
    assert fake_listing == real_listing
    assert not (tmp_path / "sys/fs/cgroup/machine.slice/vm-1").exists()


def test_sync_writes_only_changes_and_break_file_makes_reads_fail(tmp_path: Path) -> None:
    node = _busy_node()
    writer = NodeWriter(RealDirBackend(tmp_path))
    first = writer.sync(node.files())
    assert first == len(node.files())
    assert writer.sync(node.files()) == 0
    writer.break_file("sys/fs/cgroup/misc.current")
    with pytest.raises(OSError) as caught:
        (tmp_path / "sys/fs/cgroup/misc.current").read_bytes()
    assert caught.value.errno == errno.EISDIR
    state = read_misc_state(HostReader(str(tmp_path)))
    assert state.resources["tdx"].current is None
    writer.repair_file("sys/fs/cgroup/misc.current")
    writer.sync(node.files())
    assert (tmp_path / "sys/fs/cgroup/misc.current").read_text() == "tdx 6\n"


def test_fakefs_break_file() -> None:
    fs = FakeFilesystem()
    writer = NodeWriter(FakeFsBackend(fs, "/host"))
    writer.sync(_busy_node().files())
    writer.break_file("sys/fs/cgroup/misc.current")
    assert fs.isdir("/host/sys/fs/cgroup/misc.current")
    writer.repair_file("sys/fs/cgroup/misc.current")
    writer.sync(_busy_node().files())
    assert fs.resolve("/host/sys/fs/cgroup/misc.current").byte_contents == b"tdx 6\n"


def test_spec_validation_and_assignments() -> None:
    assert parse_assignments(["tdx=63", "snp=9"], "--capacity") == {"tdx": 63, "sev_es": 9}
    with pytest.raises(ValueError, match="expected RESOURCE=COUNT"):
        parse_assignments(["tdx"], "--capacity")
    with pytest.raises(ValueError, match="intel hosts have misc resources tdx, not sev"):
        Node(NodeSpec(vendor="intel", capacity={"sev": 3}))
    with pytest.raises(ValueError, match="unknown vendor"):
        Node(NodeSpec(vendor="arm"))
    with pytest.raises(ValueError, match="unknown kernel profile 'new'"):
        get_profile("new")


def test_real_dir_writes_leave_no_temporary_files(tmp_path: Path) -> None:
    writer = NodeWriter(RealDirBackend(tmp_path))
    node = _busy_node()
    writer.sync(node.files())
    node.misc.try_charge("machine.slice/vm-1", "tdx")
    assert writer.sync(node.files()) > 0
    assert not [p for p in tmp_path.rglob(".teesim-*")]


def test_registers_hold_the_hardware_key_split() -> None:
    intel = Node(NodeSpec(capacity={"tdx": 63}, registers=True, mktme_keyids=15)).registers()
    offset, data = intel["dev/cpu/0/msr"]
    assert offset == 0x87 and int.from_bytes(data, "little") == (64 << 32) | 15
    amd = Node(NodeSpec(vendor="amd", registers=True)).registers()
    offset, data = amd["dev/cpu/0/cpuid"]
    assert offset == 0x8000001F and struct.unpack("<4I", data)[2:] == (509, 100)
    assert Node(NodeSpec()).registers() == {}


def test_kernel_without_the_tdx_misc_resource_keeps_kvm_tdx() -> None:
    node = Node(NodeSpec(profile=OLD, capacity={"tdx": 31}, tdx_misc=False))
    files = node.files()
    assert files["sys/fs/cgroup/misc.capacity"] == "" and files["sys/module/kvm_intel/parameters/tdx"] == "Y\n"
    assert node.hardware_capacity == {"tdx": 31}


def test_kvm_tdx_parameter_choices() -> None:
    absent = Node(NodeSpec(kvm_tdx="absent")).files()
    assert "sys/module/kvm_intel/parameters/tdx" not in absent and " tdx_host_platform" not in absent["proc/cpuinfo"]
    assert absent["sys/module/kvm_intel/parameters/nested"] == "Y\n"
    assert Node(NodeSpec(kvm_tdx="N")).files()["sys/module/kvm_intel/parameters/tdx"] == "N\n"
    with pytest.raises(ValueError, match="kvm_tdx 'maybe'"):
        Node(NodeSpec(kvm_tdx="maybe"))


def test_all_asids_for_sev_es_still_enables_sev_in_kvm() -> None:
    files = Node(NodeSpec(vendor="amd", capacity={"sev": 0, "sev_es": 99})).files()
    assert files["sys/fs/cgroup/misc.capacity"] == "sev_es 99\n"
    assert files["sys/module/kvm_amd/parameters/sev"] == "Y\n"


def test_pci_devices_and_their_links(tmp_path: Path) -> None:
    device = PciDevice("0000:17:00.0", "0x10de", "0x2330", "0x030200", "vfio-pci", 12)
    node = Node(NodeSpec(pci=(device,)))
    assert node.files()["sys/bus/pci/devices/0000:17:00.0/class"] == "0x030200\n"
    assert node.links() == {
        "sys/bus/pci/devices/0000:17:00.0/driver": "../../../../bus/pci/drivers/vfio-pci",
        "sys/bus/pci/devices/0000:17:00.0/iommu_group": "../../../../kernel/iommu_groups/12",
    }
