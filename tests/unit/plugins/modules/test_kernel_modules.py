"""confidential.tee.kernel_modules: the modules-load file and the modules the kernel lacks, in one task.

Under a host tree (``load: false``) the file's plan, check mode, diff and revert are real. The loading path runs
with ``host_root: /`` and a stand-in kernel: ``/sys/module`` is replaced by a set the stand-in ``modprobe`` adds to,
so the tests see what the module runs and what it reads back, without loading anything into this machine's kernel.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible.module_utils.basic import AnsibleModule
from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import HostReader
from ansible_collections.confidential.tee.plugins.module_utils.host import kernel_modules as wing
from ansible_collections.confidential.tee.plugins.modules import kernel_modules

VSOCK = ["vhost_vsock", "vsock_loopback"]
CONTENT = "# Managed by confidential.tee.vsock\nvhost_vsock\nvsock_loopback\n"


def node(root: Path, loaded=("vhost_vsock",), builtin=()) -> Path:
    for name in loaded:
        (root / "sys/module" / name).mkdir(parents=True)
    (root / "proc/sys/kernel").mkdir(parents=True)
    (root / "proc/sys/kernel/osrelease").write_text("6.1.0-50-amd64\n")
    (root / "lib/modules/6.1.0-50-amd64").mkdir(parents=True)
    (root / "lib/modules/6.1.0-50-amd64/modules.builtin").write_text(
        "".join(f"kernel/drivers/x/{name}.ko\n" for name in builtin)
    )
    return root


def args(root: Path, **extra) -> dict:
    return {"host_root": str(root), "modules": VSOCK, "path": "/etc/modules-load.d/vsock.conf", "load": False} | extra


class StandInKernel:
    """``/sys/module`` as a set; ``modprobe -a -- names`` adds the names it can load (or fails, or lies)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, loaded: set[str], *, rc: int = 0, loads: bool = True):
        self.loaded, self.rc, self.loads, self.calls = set(loaded), rc, loads, []
        monkeypatch.setattr(
            kernel_modules, "loaded_modules", lambda reader, names: {name: name in self.loaded for name in names}
        )
        monkeypatch.setattr(AnsibleModule, "get_bin_path", lambda module, name, *a, **kw: f"/usr/sbin/{name}")
        monkeypatch.setattr(AnsibleModule, "run_command", self.run)

    def run(self, argv, **kwargs):
        self.calls.append(list(argv))
        if self.rc == 0 and self.loads:
            self.loaded.update(argv[argv.index("--") + 1 :])
        return self.rc, "", "modprobe: FATAL: Module vsock_loopback not found in directory /lib/modules/6.1.0"


def test_writes_the_file_reports_the_kernel_and_is_idempotent(tmp_path, run_module):
    root = node(tmp_path)
    first = run_module(kernel_modules, args(root, content=CONTENT))
    assert not first["failed"] and first["changed"], first
    assert (root / "etc/modules-load.d/vsock.conf").read_text() == CONTENT
    assert (root / "etc/modules-load.d/vsock.conf").stat().st_mode & 0o777 == 0o644
    assert first["modules"] == {"vhost_vsock": True, "vsock_loopback": False}
    assert first["loaded"] == [] and first["kept"] is None
    second = run_module(kernel_modules, args(root, content=CONTENT))
    assert not second["changed"] and second["changes"]["entries"] == [
        {"name": f"{root}/etc/modules-load.d/vsock.conf", "changed": False, "reasons": []}
    ]
    assert first["changes"]["written"] == [f"{root}/etc/modules-load.d/vsock.conf"]
    # The deprecated name (until release 0.3.0) says the same, by the path on the host.
    assert second["files"] == [{"path": "/etc/modules-load.d/vsock.conf", "changed": False, "reasons": []}]


def test_default_content_is_one_module_a_line(tmp_path, run_module):
    root = node(tmp_path)
    run_module(kernel_modules, args(root))
    assert (root / "etc/modules-load.d/vsock.conf").read_text() == "vhost_vsock\nvsock_loopback\n"


def test_check_mode_diff_is_the_plan_and_writes_nothing(tmp_path, run_module):
    root = node(tmp_path)
    planned = run_module(kernel_modules, args(root, content=CONTENT, _ansible_diff=True), check_mode=True)
    assert planned["changed"] and not (root / "etc/modules-load.d").exists()
    assert planned["diff"][0]["after"] == CONTENT


def test_a_module_built_into_the_kernel_counts_as_loaded(tmp_path):
    root = node(tmp_path, loaded=(), builtin=("vsock-loopback",))
    assert wing.loaded_modules(HostReader(str(root)), VSOCK) == {"vhost_vsock": False, "vsock_loopback": True}


def test_loads_only_what_the_kernel_lacks_and_reads_it_back(tmp_path, run_module, monkeypatch):
    kernel = StandInKernel(monkeypatch, {"vhost_vsock"})
    path = str(tmp_path / "vsock.conf")
    result = run_module(kernel_modules, {"modules": VSOCK, "path": path})
    assert not result["failed"] and result["changed"], result
    assert kernel.calls == [["/usr/sbin/modprobe", "-a", "--", "vsock_loopback"]]
    assert result["loaded"] == ["vsock_loopback"] and result["modules"] == {"vhost_vsock": True, "vsock_loopback": True}
    again = run_module(kernel_modules, {"modules": VSOCK, "path": path})
    assert not again["changed"] and again["loaded"] == [] and len(kernel.calls) == 1


def test_check_mode_names_the_modules_and_loads_nothing(tmp_path, run_module, monkeypatch):
    kernel = StandInKernel(monkeypatch, set())
    result = run_module(kernel_modules, {"modules": VSOCK, "path": str(tmp_path / "vsock.conf")}, check_mode=True)
    assert result["changed"] and result["loaded"] == VSOCK and kernel.calls == []
    assert not (tmp_path / "vsock.conf").exists()


@pytest.mark.parametrize(
    ("rc", "loads", "message"), [(1, True, "not found in directory"), (0, False, "modprobe exited 0")]
)
def test_a_module_that_does_not_load_restores_the_file(tmp_path, run_module, monkeypatch, rc, loads, message):
    StandInKernel(monkeypatch, {"vhost_vsock"}, rc=rc, loads=loads)
    (tmp_path / "vsock.conf").write_text("vhost_vsock\n")
    result = run_module(kernel_modules, {"modules": VSOCK, "path": str(tmp_path / "vsock.conf")})
    assert result["failed"] and message in result["msg"] and "restored" in result["msg"], result
    assert (tmp_path / "vsock.conf").read_text() == "vhost_vsock\n"
    assert list(tmp_path.iterdir()) == [tmp_path / "vsock.conf"], "no backup left behind"


def test_absent_removes_only_the_file_this_task_writes(tmp_path, run_module):
    root = node(tmp_path)
    run_module(kernel_modules, args(root, content=CONTENT))
    removed = run_module(kernel_modules, args(root, content=CONTENT, state="absent"))
    assert removed["changed"] and not (root / "etc/modules-load.d/vsock.conf").exists()
    assert removed["changes"]["entries"][0]["reasons"] == ["remove"]
    assert removed["changes"]["removed"] == [f"{root}/etc/modules-load.d/vsock.conf"]
    nothing = run_module(kernel_modules, args(root, content=CONTENT, state="absent"))
    assert not nothing["changed"] and nothing["kept"] is None


def test_absent_keeps_a_file_someone_edited_and_says_so(tmp_path, run_module):
    root = node(tmp_path)
    (root / "etc/modules-load.d").mkdir(parents=True)
    (root / "etc/modules-load.d/vsock.conf").write_text(CONTENT + "# mine\n")
    result = run_module(kernel_modules, args(root, content=CONTENT, state="absent"))
    assert not result["changed"] and result["kept"] == f"{root}/etc/modules-load.d/vsock.conf"
    assert any("is kept" in warning for warning in result["warnings"])
    assert (root / "etc/modules-load.d/vsock.conf").read_text() == CONTENT + "# mine\n"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"modules": ["-r", "vsock"]}, "'-r' is not a kernel module name"),
        ({"modules": ["vsock\nblacklist x"]}, "is not a kernel module name"),
        ({"modules": ["../vsock"]}, "is not a kernel module name"),
        ({"modules": []}, "non-empty list"),
        ({"path": "etc/modules-load.d/vsock.conf"}, "is not absolute"),
        ({"mode": "rw-r--r--"}, "not an octal mode"),
        ({"load": True}, "set load: false there"),
    ],
)
def test_bad_input_fails_clearly_and_writes_nothing(tmp_path, run_module, extra, message):
    root = node(tmp_path)
    result = run_module(kernel_modules, args(root) | extra)
    assert result["failed"] and message in result["msg"] and "nothing was changed" in result["msg"], result
    assert not (root / "etc").exists()


VFIO = ["vfio", "vfio_iommu_type1", "vfio_pci"]


def two_requests(tmp_path: Path, **vfio) -> dict:
    return {
        "requests": [
            {"path": str(tmp_path / "vsock.conf"), "modules": VSOCK},
            {"path": str(tmp_path / "vfio.conf"), "modules": VFIO} | vfio,
        ]
    }


def test_requests_write_every_file_and_load_with_one_modprobe(tmp_path, run_module, monkeypatch):
    kernel = StandInKernel(monkeypatch, {"vhost_vsock", "vfio"})
    result = run_module(kernel_modules, two_requests(tmp_path))
    assert not result["failed"] and result["changed"], result
    assert (tmp_path / "vsock.conf").read_text() == "vhost_vsock\nvsock_loopback\n"
    assert (tmp_path / "vfio.conf").read_text() == "vfio\nvfio_iommu_type1\nvfio_pci\n"
    assert kernel.calls == [["/usr/sbin/modprobe", "-a", "--", "vsock_loopback", "vfio_iommu_type1", "vfio_pci"]]
    assert result["modules"] == dict.fromkeys(VSOCK + VFIO, True)
    assert result["changes"]["written"] == [str(tmp_path / "vsock.conf"), str(tmp_path / "vfio.conf")]
    assert result["changes"]["commands"] == ["load vsock_loopback, vfio_iommu_type1, vfio_pci"]
    again = run_module(kernel_modules, two_requests(tmp_path))
    assert not again["changed"] and len(kernel.calls) == 1


def test_requests_are_the_same_files_as_one_task_each(tmp_path, run_module):
    """The requests form writes exactly what two single-file tasks write (content, default content, mode)."""
    root = node(tmp_path / "one")
    other = node(tmp_path / "two")
    vfio = {"path": "/etc/modules-load.d/vfio.conf", "modules": VFIO, "mode": "0600", "load": False}
    vsock = {"path": "/etc/modules-load.d/vsock.conf", "modules": VSOCK, "content": CONTENT, "load": False}
    run_module(kernel_modules, {"host_root": str(root), "requests": [vsock, vfio]})
    for single in (vsock, vfio):
        run_module(kernel_modules, {"host_root": str(other), **single})
    for name in ("vsock.conf", "vfio.conf"):
        mine, theirs = root / "etc/modules-load.d" / name, other / "etc/modules-load.d" / name
        assert (mine.read_text(), mine.stat().st_mode) == (theirs.read_text(), theirs.stat().st_mode), name


def test_a_request_that_does_not_load_restores_every_file(tmp_path, run_module, monkeypatch):
    StandInKernel(monkeypatch, {"vhost_vsock"}, rc=1)
    (tmp_path / "vsock.conf").write_text("vhost_vsock\n")
    result = run_module(kernel_modules, two_requests(tmp_path))
    assert result["failed"] and "restored" in result["msg"], result
    assert (tmp_path / "vsock.conf").read_text() == "vhost_vsock\n"
    assert sorted(tmp_path.iterdir()) == [tmp_path / "vsock.conf"], "neither file changed, no backup left behind"


def test_requests_mix_present_and_absent_and_say_what_they_kept(tmp_path, run_module, monkeypatch):
    StandInKernel(monkeypatch, set(VSOCK))
    (tmp_path / "vfio.conf").write_text("vfio\n# mine\n")
    result = run_module(kernel_modules, two_requests(tmp_path, state="absent"))
    assert not result["failed"] and result["changed"], result
    assert (tmp_path / "vsock.conf").exists() and (tmp_path / "vfio.conf").read_text() == "vfio\n# mine\n"
    assert result["kept"] == str(tmp_path / "vfio.conf") and result["kept_paths"] == [str(tmp_path / "vfio.conf")]
    assert result["loaded"] == []


@pytest.mark.parametrize(
    ("requests", "message"),
    [
        ([], "requests is empty"),
        ([{"path": "/etc/a.conf", "modules": ["vfio"]}] * 2, "'/etc/a.conf' is given twice"),
        (
            [{"path": "/etc/a.conf", "modules": ["vfio"]}, {"path": "/etc/b.conf", "modules": ["x\ny"]}],
            "requests[1] (/etc/b.conf): modules: 'x\\ny' is not a kernel module name",
        ),
        ([{"path": "/etc/a.conf", "modules": ["vfio"], "load": True}], "requests[0] (/etc/a.conf): load: true"),
    ],
)
def test_bad_requests_fail_clearly_and_write_nothing(tmp_path, run_module, requests, message):
    root = node(tmp_path)
    with_load = [{"load": False} | request for request in requests]
    result = run_module(kernel_modules, {"host_root": str(root), "requests": with_load})
    assert result["failed"] and message in result["msg"] and "nothing was changed" in result["msg"], result
    assert not (root / "etc").exists()


def test_requests_exclude_the_one_file_options(tmp_path, run_module):
    result = run_module(kernel_modules, two_requests(tmp_path) | {"path": str(tmp_path / "x.conf")})
    assert result["failed"] and "mutually exclusive" in result["msg"], result
    neither = run_module(kernel_modules, {})
    assert neither["failed"] and "requests, path" in neither["msg"], neither
    half = run_module(kernel_modules, {"modules": VSOCK})
    assert half["failed"] and "required together: path, modules" in half["msg"], half
