"""Several roles' kernel arguments as one change (one boot update), and kernel-install's entry read back."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from ansible_collections.confidential.tee.plugins.module_utils.boot import kernel_cmdline as kc
from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import HostReader

from .test_kernel_cmdline import DEBIAN_GRUB, apply_plan, grub_root, tree

TDX = {"name": "90-confidential-tee-tdx", "present": ["kvm_intel.tdx=1", "nohibernate"], "absent": []}
IOMMU = {"name": "91-confidential-tee-iommu", "present": ["intel_iommu=on"], "absent": []}


def files_of(root: Path) -> dict[str, str]:
    """Every file under the tree (backups aside), with its content."""
    return {
        str(path.relative_to(root)): path.read_text()
        for path in sorted(root.rglob("*"))
        if path.is_file() and not path.name.endswith("~")
    }


def run_all(root, requests, calls=None, rc=0, check_mode=False):
    result = kc.plan_requests(HostReader(root), kc.parse_requests(requests))
    executor = apply_plan(root, result, check_mode=check_mode, calls=calls, rc=rc)
    kc.verify(result, executor)
    return result, executor


# -------------------------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("requests", "fragment"),
    [
        ([], "non-empty list"),
        ("90-tdx", "non-empty list"),
        ([{"present": ["a"]}], r"requests\[0\] must be a dictionary"),
        ([{"name": "a", "present": ["x"], "other": 1}], r"requests\[0\] must be a dictionary"),
        ([{"name": "../a", "present": ["x"]}], r"requests\[0\]\.name '\.\./a' must be a file-name stem"),
        ([TDX, {"name": "b", "present": "intel_iommu=on"}], r"requests\[1\] \(b\): present .*list"),
        ([TDX, {"name": "b", "present": ["a b"]}], r"requests\[1\] \(b\): present argument 'a b'"),
        ([TDX, {"name": "b", "present": ["x"], "absent": ["x"]}], r"requests\[1\] \(b\): x requested both"),
        ([TDX, dict(TDX)], "90-confidential-tee-tdx more than once"),
        ([TDX, {"name": "b", "present": ["kvm_intel.tdx=0"]}], "tdx wants kvm_intel.tdx=1 but b wants kvm_intel.tdx=0"),
        ([TDX, {"name": "b", "absent": ["nohibernate"]}], "wants nohibernate present but b wants nohibernate absent"),
        ([{"name": "b", "absent": ["kvm-intel.tdx=1"]}, TDX], "wants kvm_intel.tdx=1 present but b wants"),
    ],
)
def test_bad_requests_are_refused_before_anything_is_read(requests, fragment):
    with pytest.raises(kc.CmdlineError, match=fragment):
        kc.parse_requests(requests)


def test_one_bad_request_writes_nothing(tmp_path):
    root = grub_root(tmp_path)
    before = files_of(tmp_path)
    with pytest.raises(kc.CmdlineError, match="contradict"):
        run_all(root, [TDX, {"name": "b", "absent": ["kvm_intel.tdx"]}])
    assert files_of(tmp_path) == before


def test_requests_that_agree_on_an_argument_are_one_request():
    requests = kc.parse_requests([TDX, {"name": "b", "present": ["nohibernate", "intel_iommu=on"]}])
    present, absent = kc.combine(requests)
    assert [arg.raw for arg in present] == ["kvm_intel.tdx=1", "nohibernate", "intel_iommu=on"] and absent == []


# -------------------------------------------------------------------------------------------- GRUB


def test_grub_requests_write_each_dropin_and_update_once(tmp_path):
    one = tmp_path / "one"
    calls = []
    root = grub_root(one)
    result, _ = run_all(root, [TDX, IOMMU], calls=calls)
    assert calls == [["chroot", root, "/usr/sbin/update-grub"]]
    assert [a.path for a in result.actions if a.kind == "write"] == [
        "/etc/default/grub",
        "/etc/default/grub.d/90-confidential-tee-tdx.cfg",
        "/etc/default/grub.d/91-confidential-tee-iommu.cfg",
    ]
    # The files are those one task per role writes, one after the other.
    apart = tmp_path / "apart"
    other = grub_root(apart)
    for request in (TDX, IOMMU):
        apply_plan(other, kc.plan(HostReader(other), request["present"], request["absent"], name=request["name"]))
    assert files_of(one) == files_of(apart)
    assert kc.plan_requests(HostReader(root), kc.parse_requests([TDX, IOMMU])).actions == []


def test_grub_revert_of_both_requests_in_one_update(tmp_path):
    root = grub_root(tmp_path)
    run_all(root, [TDX, IOMMU])
    calls = []
    revert = [{"name": r["name"], "absent": r["present"]} for r in (TDX, IOMMU)]
    result, _ = run_all(root, revert, calls=calls)
    assert calls == [["chroot", root, "/usr/sbin/update-grub"]]
    assert sorted(a.path for a in result.actions if a.kind == "remove") == [
        "/etc/default/grub.d/90-confidential-tee-tdx.cfg",
        "/etc/default/grub.d/91-confidential-tee-iommu.cfg",
    ]
    assert not {"kvm_intel.tdx=1", "nohibernate", "intel_iommu=on"} & set(result.configured)


def test_failed_update_restores_every_dropin_of_the_task(tmp_path):
    root = grub_root(tmp_path)
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    with pytest.raises(kc.CmdlineError, match=r"update-grub failed with exit code 1: boom; every file .* restored"):
        run_all(root, [TDX, IOMMU], rc=1)
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before
    assert (tmp_path / "etc/default/grub").read_text() == DEBIAN_GRUB


def test_failed_readback_restores_every_dropin_of_the_task(tmp_path):
    root = grub_root(tmp_path)
    before = files_of(tmp_path)

    def sabotage(argv):  # a tool that rewrites the drop-ins it should only have read
        for name in ("90-confidential-tee-tdx", "91-confidential-tee-iommu"):
            (tmp_path / f"etc/default/grub.d/{name}.cfg").write_text('GRUB_CMDLINE_LINUX=""\n')
        return 0, "", ""

    result = kc.plan_requests(HostReader(root), kc.parse_requests([TDX, IOMMU]))
    executor = kc.Executor(HostReader(root), False, sabotage)
    executor.execute(result)
    with pytest.raises(kc.CmdlineError, match=r"not as planned.*every file of the task was restored"):
        kc.verify(result, executor)
    assert files_of(tmp_path) == before


def test_check_mode_plans_the_same_and_writes_nothing(tmp_path):
    root = grub_root(tmp_path)
    before = files_of(tmp_path)
    calls = []
    checked = kc.plan_requests(HostReader(root), kc.parse_requests([TDX, IOMMU]))
    executor = apply_plan(root, checked, check_mode=True, calls=calls)
    assert calls == [] and files_of(tmp_path) == before
    diffs = executor.changes.diff()
    assert [d["after_header"] for d in diffs] == [
        f"{root}/etc/default/grub",
        f"{root}/etc/default/grub.d/90-confidential-tee-tdx.cfg",
        f"{root}/etc/default/grub.d/91-confidential-tee-iommu.cfg",
    ]
    real, _ = run_all(root, [TDX, IOMMU])
    assert [a.as_dict() for a in real.actions] == [a.as_dict() for a in checked.actions]
    assert real.configured == checked.configured


# -------------------------------------------------------------------------------------------- kernel-install

RELEASE = "6.1.0-50-amd64"
MACHINE_ID = "0123456789abcdef0123456789abcdef"


def kernel_install_root(tmp_path, entry_root="/boot/efi", token=None, type1=True):
    """A Debian host with kernel-install; ``entry_root`` holds loader/entries and, with ``type1``, the
    loader/entries.srel saying ``type1`` that 'bootctl install' writes (systemd 252 bootctl.c)."""
    files = {
        "/etc/kernel/cmdline": "root=UUID=1 ro quiet kvm_intel.tdx=0\n",
        "/etc/machine-id": MACHINE_ID + "\n",
        "/etc/os-release": 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\n',
        "/proc/sys/kernel/osrelease": RELEASE + "\n",
        "/boot/vmlinuz-" + RELEASE: "",
        "/boot/initrd.img-" + RELEASE: "",
    }
    if token:
        files["/etc/kernel/entry-token"] = token + "\n"
    if entry_root and type1:
        files[f"{entry_root}/loader/entries.srel"] = "type1\n"
    root = tree(tmp_path, files, executables=["/usr/bin/kernel-install"])
    if entry_root:
        (tmp_path / entry_root.lstrip("/") / "loader/entries").mkdir(parents=True)
    return root


def stand_in_kernel_install(tmp_path, boot="/boot/efi", token=MACHINE_ID, tries=""):
    """What kernel-install add does where its layout is bls (90-loaderentry.install, systemd 252): the entry
    ``<token>-<release>.conf`` in ``$BOOT/loader/entries``, its options /etc/kernel/cmdline squeezed plus
    systemd.machine_id= when the token is the machine ID. The test says where $BOOT is; None writes nothing."""
    calls = []

    def run(argv):
        calls.append(argv)
        if boot:
            entries = tmp_path / boot.lstrip("/") / "loader/entries"
            entries.mkdir(parents=True, exist_ok=True)
            options = " ".join((tmp_path / "etc/kernel/cmdline").read_text().split())
            if token == MACHINE_ID:
                options += f" systemd.machine_id={MACHINE_ID}"
            entry = entries / f"{token}-{RELEASE}{tries}.conf"
            entry.write_text(f"title Debian\nversion {RELEASE}\noptions    {options}\nlinux /x/linux\n")
        return 0, "", ""

    return run, calls


def run_kernel_install(root, runner, requests=(TDX, IOMMU)):
    result = kc.plan_requests(HostReader(root), kc.parse_requests(list(requests)))
    executor = kc.Executor(HostReader(root), False, runner)
    executor.execute(result)
    kc.verify(result, executor)
    return result, executor


@pytest.mark.parametrize(
    ("entry_root", "token", "tries"),
    [("/boot/efi", None, ""), ("/efi", None, "+3"), ("/boot", "debian", ""), ("/boot/efi", "custom", "+2-1")],
)
def test_kernel_install_entry_carrying_the_line_is_confirmed(tmp_path, entry_root, token, tries):
    root = kernel_install_root(tmp_path, entry_root, token)
    runner, calls = stand_in_kernel_install(tmp_path, entry_root, token or MACHINE_ID, tries)
    result, _ = run_kernel_install(root, runner)
    assert len(calls) == 1  # both requests, one kernel-install add
    assert result.after_tools is not None and result.warnings == []
    assert (tmp_path / "etc/kernel/cmdline").read_text() == (
        "root=UUID=1 ro quiet kvm_intel.tdx=1 nohibernate intel_iommu=on\n"
    )
    assert result.configured[-3:] == ["kvm_intel.tdx=1", "nohibernate", "intel_iommu=on"]


def test_kernel_install_on_a_bls_layout_that_writes_no_entry_restores_and_says_why(tmp_path):
    root = kernel_install_root(tmp_path)  # /boot/efi says type1: kernel-install must write the entry there
    before = files_of(tmp_path)
    runner, calls = stand_in_kernel_install(tmp_path, boot=None)  # a plugin that failed silently
    with pytest.raises(kc.CmdlineError) as caught:
        run_kernel_install(root, runner)
    message = str(caught.value)
    assert len(calls) == 1
    assert f"exited 0 but wrote no boot entry for {RELEASE}" in message
    assert f"{MACHINE_ID}-{RELEASE}.conf in /boot/efi/loader/entries;" in message
    assert "/boot/efi/loader/entries.srel says 'type1', so layout=bls" in message
    assert "every file of the task was restored" in message
    assert files_of(tmp_path) == before


@pytest.mark.parametrize(
    ("entry_root", "type1", "why"),
    [
        (None, False, "$BOOT is /boot (the fallback: no candidate holds"),
        ("/boot/efi", False, "neither /boot/efi/loader/entries.srel nor an entry-token directory"),
    ],
)
def test_kernel_install_on_layout_other_succeeds_with_a_warning(tmp_path, entry_root, type1, why):
    """No $BOOT holds Type #1 entries: kernel-install writes none by design, and the task must not fail on it."""
    root = kernel_install_root(tmp_path, entry_root, type1=type1)
    runner, calls = stand_in_kernel_install(tmp_path, boot=None)
    result, executor = run_kernel_install(root, runner)
    assert len(calls) == 1 and result.after_tools is None
    assert "kernel-install uses layout=other on this host" in result.warnings[0] and why in result.warnings[0]
    assert (tmp_path / "etc/kernel/cmdline").read_text().endswith("nohibernate intel_iommu=on\n")
    assert executor.backups  # the change stays: only the backup of /etc/kernel/cmdline was made


def test_kernel_install_that_leaves_the_old_entry_restores_it_all(tmp_path):
    root = kernel_install_root(tmp_path)
    old = tmp_path / f"boot/efi/loader/entries/{MACHINE_ID}-{RELEASE}.conf"
    old.write_text(f"title Debian\noptions root=UUID=1 ro quiet kvm_intel.tdx=0 systemd.machine_id={MACHINE_ID}\n")
    before = files_of(tmp_path)
    calls = []

    def silent(argv):  # exits 0, writes nothing: the entry still has the old line
        calls.append(argv)
        return 0, "", ""

    with pytest.raises(kc.CmdlineError, match=r"does not carry the planned command line .*intel_iommu=on: "):
        run_kernel_install(root, silent)
    assert files_of(tmp_path) == before and len(calls) == 1


def test_kernel_install_entry_of_another_kernel_does_not_count(tmp_path):
    root = kernel_install_root(tmp_path)
    runner, _ = stand_in_kernel_install(tmp_path)

    def other_release(argv):
        runner(argv)
        entries = tmp_path / "boot/efi/loader/entries"
        for entry in entries.iterdir():
            shutil.move(entry, entries / entry.name.replace(RELEASE, "6.1.0-49-amd64"))
        return 0, "", ""

    with pytest.raises(kc.CmdlineError, match="wrote no boot entry"):
        run_kernel_install(root, other_release)


def test_kernel_install_check_mode_reads_no_entry(tmp_path):
    root = kernel_install_root(tmp_path, entry_root=None)
    result = kc.plan_requests(HostReader(root), kc.parse_requests([TDX, IOMMU]))
    executor = apply_plan(root, result, check_mode=True, calls=[])
    kc.verify(result, executor)  # nothing ran, so there is nothing to confirm
    assert [a.kind for a in result.actions] == ["write", "command"]


def test_kernel_install_boot_root_from_install_conf_is_where_the_entry_is_read(tmp_path):
    root = kernel_install_root(tmp_path, entry_root="/boot/efi")
    (tmp_path / "etc/kernel/install.conf").write_text('layout=bls\nBOOT_ROOT="/srv/esp"\n')
    (tmp_path / "srv/esp/loader/entries").mkdir(parents=True)
    runner, _ = stand_in_kernel_install(tmp_path)  # writes into /boot/efi, not the configured BOOT_ROOT
    with pytest.raises(kc.CmdlineError, match=r"wrote no boot entry .* in /srv/esp/loader/entries;"):
        run_kernel_install(root, runner)


def test_kernel_install_with_another_layout_warns_instead_of_reading_an_entry(tmp_path):
    root = kernel_install_root(tmp_path, entry_root=None)
    (tmp_path / "usr/lib/kernel").mkdir(parents=True)
    (tmp_path / "usr/lib/kernel/install.conf").write_text("layout=uki\n")
    calls = []
    result, _ = run_kernel_install(root, lambda argv: calls.append(argv) or (0, "", ""))
    assert len(calls) == 1 and result.after_tools is None
    assert "kernel-install uses layout=uki on this host" in result.warnings[0]
    assert "/usr/lib/kernel/install.conf sets layout=uki" in result.warnings[0]
