"""BLS entries in every shape the specification allows, and boot tools that run only after the plan is proven.

The grubby stand-in reads and rewrites entries the way grubby-bls does (rhboot/grubby eed6ef6: ``^options[ \\t]``
lines are read, every line starting with ``options`` is rewritten), except that it removes exact words; a second
stand-in reads only ``options`` followed by a space, as the simplest grubby would. Both must give the same result:
the module hands grubby only lines in the one shape every reader agrees on.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from ansible_collections.confidential.tee.plugins.module_utils.boot import bls
from ansible_collections.confidential.tee.plugins.module_utils.boot import kernel_cmdline as kc
from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import HostReader

ENTRY = "title Fedora ({ver})\nversion {ver}\nlinux /vmlinuz-{ver}\n{options}\ninitrd /initramfs-{ver}.img\n"
TOUCHED = ("/etc/default/grub", "/etc/kernel/cmdline", "/boot/grub2/grubenv")


def make_root(tmp_path, options_new, options_old="options root=UUID=1 ro"):
    files = {
        "boot/loader/entries/m-6.8.5.conf": ENTRY.format(ver="6.8.5", options=options_old),
        "boot/loader/entries/m-6.9.7.conf": ENTRY.format(ver="6.9.7", options=options_new),
        "etc/default/grub": 'GRUB_CMDLINE_LINUX="root=UUID=1 ro iommu=pt"\n',
        "etc/kernel/cmdline": "root=UUID=1 ro iommu=pt\n",
        "boot/grub2/grubenv": "# GRUB Environment Block\nsaved_entry=m-6.9.7\n",
    }
    for path, text in files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_bytes(text.encode())
    tool = tmp_path / "usr/sbin/grubby"
    tool.parent.mkdir(parents=True, exist_ok=True)
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    return str(tmp_path)


def snapshot(root):
    return {str(p): p.read_bytes() for p in sorted(Path(root).rglob("*")) if p.is_file()}


def grubby(root, calls, line_re=r"^options[ \t]", also=None):
    """Edit every entry the way grubby --update-kernel=ALL does; ``also`` simulates its other files."""

    def run(argv):
        argv = argv[2:] if argv[0] == "chroot" else argv
        calls.append(argv)
        opts = dict(arg.split("=", 1) for arg in argv[1:])
        for entry in (Path(root) / "boot/loader/entries").glob("*.conf"):
            text = entry.read_text()
            found = [line for line in text.split("\n") if re.match(line_re, line)]
            words = " ".join(re.sub(r"^options[ \t]*", "", line) for line in found).split()
            words = [w for w in words if w not in opts.get("--remove-args", "").split()]
            words += [w for w in opts.get("--args", "").split() if w not in words]
            entry.write_text(re.sub(r"(?m)^options.*$", "options " + " ".join(words), text))
        if also:
            also()
        return 0, "", ""

    return run


SHAPES = {
    "tab": "options\troot=UUID=1 iommu=pt ro",
    "spaces and tabs": "options \t  root=UUID=1   iommu=pt\tro  ",
    "indented": "  \toptions root=UUID=1 iommu=pt ro",
    "crlf": "options root=UUID=1 iommu=pt ro\r",
    "comment around": "# options iommu=off\noptions root=UUID=1 iommu=pt ro\n#options x",
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("strict", [False, True])
def test_every_shape_is_read_as_the_spec_says_and_changed_once(tmp_path, shape, strict):
    root = make_root(tmp_path, SHAPES[shape])
    result = kc.plan(HostReader(root), [], ["iommu=pt"])
    assert result.before == ["root=UUID=1", "iommu=pt", "ro"]
    commands = [a.argv for a in result.actions if a.kind == "command"]
    assert commands == [["/usr/sbin/grubby", "--update-kernel=ALL", "--remove-args=iommu=pt"]]
    calls = []
    # strict: a grubby that only reads 'options ' + words; the normalized line is all it ever sees.
    executor = kc.Executor(HostReader(root), False, grubby(root, calls, r"^options " if strict else r"^options[ \t]"))
    executor.execute(result)
    kc.verify(result, executor)
    assert len(calls) == 1
    entry = (tmp_path / "boot/loader/entries/m-6.9.7.conf").read_text()
    assert "options root=UUID=1 ro" in entry and "iommu=pt" not in entry.replace("# options", "")
    assert kc.plan(HostReader(root), [], ["iommu=pt"]).actions == []


def test_options_key_without_a_value_reads_as_empty_and_gets_the_arguments(tmp_path):
    root = make_root(tmp_path, "options")
    result = kc.plan(HostReader(root), ["nohibernate"], [])
    assert result.before == []
    calls = []
    executor = kc.Executor(HostReader(root), False, grubby(root, calls))
    executor.execute(result)
    kc.verify(result, executor)
    assert "options nohibernate\n" in (tmp_path / "boot/loader/entries/m-6.9.7.conf").read_text()


def test_a_tab_entry_with_removals_and_additions_is_normalized_once_then_edited(tmp_path):
    root = make_root(tmp_path, "options\troot=UUID=1 kvm_intel.tdx=0 rhgb")
    result = kc.plan(HostReader(root), ["kvm_intel.tdx=1"], ["rhgb"])
    # Both entries are written as grubby leaves them (the old one gains kvm_intel.tdx=1 too), then grubby runs.
    assert [a.path for a in result.actions if a.kind == "write"] == [
        "/boot/loader/entries/m-6.8.5.conf",
        "/boot/loader/entries/m-6.9.7.conf",
    ]
    assert [a.argv for a in result.actions if a.kind == "command"] == [
        ["/usr/sbin/grubby", "--update-kernel=ALL", "--remove-args=kvm_intel.tdx=0 rhgb"],
        ["/usr/sbin/grubby", "--update-kernel=ALL", "--args=kvm_intel.tdx=1"],
    ]
    calls = []
    executor = kc.Executor(HostReader(root), False, grubby(root, calls, r"^options "))
    executor.execute(result)
    kc.verify(result, executor)
    assert "options root=UUID=1 kvm_intel.tdx=1\n" in (tmp_path / "boot/loader/entries/m-6.9.7.conf").read_text()


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ("options a\noptions iommu=pt", r"2 'options' lines \(lines 4, 5\).*Merge them"),
        ("options a iommu=pt\noptions_extra b", r"line 5 of .* starts with 'options' but its key is 'options_extra'"),
    ],
)
def test_shapes_the_readers_disagree_on_are_refused_before_anything_runs(tmp_path, options, words):
    root = make_root(tmp_path, options)
    with pytest.raises(kc.CmdlineError, match=words + ".*nothing was changed"):
        kc.plan(HostReader(root), [], ["iommu=pt"])


def test_tab_entry_left_unchanged_warns_that_grub_misreads_it(tmp_path):
    root = make_root(tmp_path, "options\troot=UUID=1 ro", "options\troot=UUID=1 ro")
    result = kc.plan(HostReader(root), [], ["iommu=pt"])
    assert result.actions == []
    assert any("GRUB's blscfg ends the key at the first space" in w for w in result.warnings)


def test_a_grubby_that_fails_half_way_restores_every_file_it_may_touch(tmp_path):
    root = make_root(tmp_path, "options root=UUID=1 iommu=pt ro")
    before = snapshot(root)

    def half_done():
        for path in TOUCHED:
            (tmp_path / path.lstrip("/")).write_text("changed by grubby\n")

    calls = []
    edit = grubby(root, calls, also=half_done)

    def failing(argv):
        edit(argv)
        return 1, "", "grubby: error writing /boot/grub2/grubenv"

    result = kc.plan(HostReader(root), [], ["iommu=pt"])
    executor = kc.Executor(HostReader(root), False, failing)
    with pytest.raises(kc.CmdlineError, match=r"exit code 1: grubby: error writing .*restored"):
        executor.execute(result)
    assert snapshot(root) == before


def test_a_grubby_whose_result_is_wrong_is_undone_everywhere(tmp_path):
    root = make_root(tmp_path, "options root=UUID=1 iommu=pt ro")
    before = snapshot(root)

    def wrong(argv):
        for path in TOUCHED:
            (tmp_path / path.lstrip("/")).write_text("changed by grubby\n")
        entry = tmp_path / "boot/loader/entries/m-6.9.7.conf"
        entry.write_text(entry.read_text().replace("options root=UUID=1 ro", "options ro root=UUID=1"))
        return 0, "", ""  # claims success, writes the entry in an order of its own

    result = kc.plan(HostReader(root), [], ["iommu=pt"])
    executor = kc.Executor(HostReader(root), False, wrong)
    executor.execute(result)
    with pytest.raises(kc.CmdlineError, match=r"not as planned.*restored"):
        kc.verify(result, executor)
    assert snapshot(root) == before


def test_normalized_changes_only_the_options_line():
    text = "title x\r\n  options\ta  b \r\n# options c\r\n"
    assert bls.normalized(text) == "title x\r\noptions a  b\n# options c\r\n"
    assert bls.options_text("e.conf", text) == "a  b"


# ---------------------------------------------------------------------------------------------- GRUB and kernel-install


def grub_tree(tmp_path, extra_files=None):
    files = {"etc/default/grub": 'GRUB_CMDLINE_LINUX="quiet"\n', "boot/grub/grub.cfg": "menuentry old\n"}
    files.update(extra_files or {})
    for path, text in files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    (tmp_path / "etc/default/grub.d").mkdir(exist_ok=True)
    tool = tmp_path / "usr/sbin/update-grub"
    tool.parent.mkdir(parents=True, exist_ok=True)
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    return str(tmp_path)


def test_update_grub_never_runs_when_the_written_files_are_not_as_planned(tmp_path, monkeypatch):
    root = grub_tree(tmp_path)
    before = snapshot(root)
    result = kc.plan(HostReader(root), ["nohibernate"], [], name="tee")
    calls = []

    def readback(_host_root, _run):
        return ["quiet"]  # what a file sourced later (or a changed shell) would make of the written files

    result.readback = readback
    executor = kc.Executor(HostReader(root), False, lambda argv: calls.append(argv) or (0, "", ""))
    with pytest.raises(kc.CmdlineError, match=r"so no tool was run.*restored"):
        executor.execute(result)
    assert calls == [] and snapshot(root) == before


def test_grub_cfg_regenerated_before_a_failure_is_restored(tmp_path):
    root = grub_tree(tmp_path)
    before = snapshot(root)
    result = kc.plan(HostReader(root), ["nohibernate"], [], name="tee")

    def update_grub(argv):
        (tmp_path / "boot/grub/grub.cfg").write_text("menuentry new nohibernate\n")
        return 0, "", ""

    executor = kc.Executor(HostReader(root), False, update_grub)
    executor.execute(result)
    executor.rollback()  # what verify() and the module do on any later failure
    assert snapshot(root) == before


# Fedora keeps the entries under /boot, Debian on the ESP it mounts at /boot/efi.
@pytest.mark.parametrize("boot", ["boot", "boot/efi"])
def test_kernel_install_runs_after_the_written_file_is_proven_and_its_entries_are_restored(tmp_path, boot):
    release = "6.9.7"
    files = {
        "etc/kernel/cmdline": "root=UUID=1 ro\n",
        "proc/sys/kernel/osrelease": release + "\n",
        f"usr/lib/modules/{release}/vmlinuz": "kernel",
        f"{boot}/loader/entries/m-6.9.7.conf": ENTRY.format(ver=release, options="options root=UUID=1 ro"),
    }
    for path, text in files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    tool = tmp_path / "usr/bin/kernel-install"
    tool.parent.mkdir(parents=True, exist_ok=True)
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    before = snapshot(str(tmp_path))
    seen = []

    def kernel_install(argv):
        seen.append((tmp_path / "etc/kernel/cmdline").read_text())
        (tmp_path / boot / "loader/entries/m-6.9.7.conf").write_text("half written")
        return 1, "", "kernel-install: failed"

    result = kc.plan(HostReader(str(tmp_path)), ["nohibernate"], [], setup="kernel_install")
    executor = kc.Executor(HostReader(str(tmp_path)), False, kernel_install)
    with pytest.raises(kc.CmdlineError, match=r"kernel-install: failed.*restored"):
        executor.execute(result)
    assert seen == ["root=UUID=1 ro nohibernate\n"]
    assert snapshot(str(tmp_path)) == before


def test_a_drop_in_name_too_long_for_a_file_name_is_refused_before_anything(tmp_path):
    root = grub_tree(tmp_path)
    with pytest.raises(kc.CmdlineError, match=r"must fit a file name .255 bytes, NAME_MAX.; choose a shorter name"):
        kc.plan(HostReader(root), ["nohibernate"], [], name="n" * 252)
    assert kc.plan(HostReader(root), ["nohibernate"], [], name="n" * 251).actions


# ---------------------------------------------------------------------------------------------- check mode = real run

# Every separator the specification (whitespace: spaces or tabs) and GRUB's blscfg (the key ends at the first space,
# at the first tab on a line without one) accept, between the key and its value and between the arguments.
SEPARATORS = {
    **SHAPES,
    "tabs between arguments": "options root=UUID=1\tiommu=pt\tro",
    "tab key, tabs between arguments": "options\troot=UUID=1\tiommu=pt\tro",
    "runs of blanks": "options  root=UUID=1 \t iommu=pt  \tro \t",
    "tab key, spaces between arguments, CRLF": "options\troot=UUID=1 iommu=pt ro\r",
}


def grubby_modern(root, calls):
    """grubby-bls as Fedora ships it: removes exact words, removes each added name and appends the added ones."""

    def run(argv):
        argv = argv[2:] if argv[0] == "chroot" else argv
        calls.append(argv)
        opts = dict(arg.split("=", 1) for arg in argv[1:])
        added = opts.get("--args", "").split()
        for entry in (Path(root) / "boot/loader/entries").glob("*.conf"):
            text = entry.read_text()
            found = [line for line in text.split("\n") if re.match(r"^options[ \t]", line)]
            words = " ".join(re.sub(r"^options[ \t]*", "", line) for line in found).split()
            words = [w for w in words if w not in opts.get("--remove-args", "").split()]
            words = [w for w in words if w.split("=", 1)[0] not in {a.split("=", 1)[0] for a in added}] + added
            entry.write_text(re.sub(r"(?m)^options.*$", "options " + " ".join(words), text))
        return 0, "", ""

    return run


@pytest.mark.parametrize("shape", sorted(SEPARATORS))
@pytest.mark.parametrize("grubby_kind", ["appends missing", "modern"])
@pytest.mark.parametrize(("present", "absent"), [([], ["iommu=pt"]), (["kvm_intel.tdx=1", "ro"], ["iommu=pt"])])
def test_check_mode_diff_is_the_file_the_real_run_leaves(tmp_path, shape, grubby_kind, present, absent):
    """One plan: the files check mode shows are, byte for byte, the files after the real run and grubby."""
    checked_root = make_root(tmp_path / "checked", SEPARATORS[shape])
    real_root = make_root(tmp_path / "real", SEPARATORS[shape])
    checked = kc.plan(HostReader(checked_root), present, absent)
    shown = kc.Executor(HostReader(checked_root), True, None)
    shown.plan(checked)
    before = snapshot(checked_root)
    shown.execute(checked)
    assert snapshot(checked_root) == before  # check mode wrote nothing
    planned = {change.path: change.after for change in shown.changes.files if change.changed}
    assert planned  # the entries are part of the diff, whatever their shape

    calls = []
    runner = grubby(real_root, calls) if grubby_kind == "appends missing" else grubby_modern(real_root, calls)
    real = kc.plan(HostReader(real_root), present, absent)
    executor = kc.Executor(HostReader(real_root), False, runner)
    executor.execute(real)
    kc.verify(real, executor)
    for path, after in planned.items():
        assert (Path(real_root) / path.lstrip("/")).read_bytes() == after, path
    assert real.configured == checked.configured  # the arguments' diff is the run's too
    assert [c for c in calls if c[0].endswith("grubby")] == [a.argv for a in real.actions if a.kind == "command"]
