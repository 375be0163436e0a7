"""Token engine, boot-setup detection and action planning of module_utils.boot.kernel_cmdline."""

from __future__ import annotations

import os
import stat
from collections import Counter
from pathlib import Path

import pytest
from ansible_collections.confidential.tee.plugins.module_utils.boot import kernel_cmdline as kc
from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import HostReader
from ansible_collections.confidential.tee.plugins.module_utils.host.cmdline import tokenize
from hypothesis import given, settings
from hypothesis import strategies as st

DEBIAN_GRUB = """# If you change this file, run 'update-grub' afterwards to update
# /boot/grub/grub.cfg.
GRUB_DEFAULT=0
GRUB_TIMEOUT=5
GRUB_DISTRIBUTOR=`lsb_release -i -s 2> /dev/null || echo Debian`
GRUB_CMDLINE_LINUX_DEFAULT="quiet splash"
GRUB_CMDLINE_LINUX="console=tty0  console=ttyS0,115200n8 kvm_intel.tdx=0"   # serial console
"""

BLS_ENTRY = """title Fedora Linux ({ver}) 40
version {ver}
linux /vmlinuz-{ver}
initrd /initramfs-{ver}.img
options root=UUID=0b1c ro rhgb quiet {extra}
grub_users $grub_users
grub_arg --unrestricted
grub_class fedora
"""


def args(*raws):
    return [kc.parse_arg(r) for r in raws]


def tree(root, files, executables=()):
    for path, content in files.items():
        full = root / path.lstrip("/")
        full.parent.mkdir(parents=True, exist_ok=True)
        full.write_text(content)
    for path in executables:
        full = root / path.lstrip("/")
        full.parent.mkdir(parents=True, exist_ok=True)
        full.write_text("#!/bin/sh\n")
        full.chmod(0o755)
    return str(root)


def apply_plan(root, result, check_mode=False, calls=None, rc=0):
    def run(argv):
        if calls is not None:
            calls.append(argv)
        return rc, "", "boom" if rc else ""

    executor = kc.Executor(HostReader(root), check_mode, run)
    executor.execute(result)
    return executor


# -------------------------------------------------------------------------------------------- tokens


def test_exact_tokens_never_substrings():
    before = "tdx=1 nohibernate_x"
    after = kc.edit_cmdline(before, args("kvm_intel.tdx=1", "nohibernate"), [])
    assert after == "tdx=1 nohibernate_x kvm_intel.tdx=1 nohibernate"
    assert kc.edit_cmdline("kvm_intel.tdx=1 tdx=1", [], args("tdx")) == "kvm_intel.tdx=1"


def test_module_parameter_names_compare_dash_and_underscore_alike():
    assert kc.edit_cmdline("kvm-intel.tdx=0 q", args("kvm_intel.tdx=1"), []) == "kvm_intel.tdx=1 q"
    # __setup names too: the kernel's parameqn() compares them with dashes and underscores alike.
    assert kc.edit_cmdline("intel-iommu=on", args("intel_iommu=on"), []) == "intel-iommu=on"


def test_present_replaces_value_in_place_and_collapses_repeats():
    text = "a kvm_amd.sev=0 b kvm_amd.sev=0 c"
    assert kc.edit_cmdline(text, args("kvm_amd.sev=1"), []) == "a kvm_amd.sev=1 b c"
    # One occurrence already right: the other, conflicting ones go (the kernel would take the last).
    assert kc.edit_cmdline("x=1 y x=2", args("x=1"), []) == "x=1 y"


def test_present_satisfied_is_a_no_op_even_with_odd_spacing():
    text = "  ro\tquiet   kvm_intel.tdx=1 \n"
    assert kc.edit_cmdline(text, args("kvm_intel.tdx=1", "ro"), []) == text


def test_quoted_values_compare_unquoted():
    assert kc.edit_cmdline('foo="bar"', args("foo=bar"), []) == 'foo="bar"'


def test_flag_and_valued_are_different_settings():
    assert kc.edit_cmdline("nohibernate=1", args("nohibernate"), []) == "nohibernate"


def test_absent_by_name_and_by_value():
    assert kc.edit_cmdline("iommu=pt a iommu=off", [], args("iommu")) == "a"
    assert kc.edit_cmdline("iommu=pt a iommu=off", [], args("iommu=pt")) == "a iommu=off"


def test_empty_and_whitespace_only_cmdlines():
    assert kc.edit_cmdline("", args("a=1"), []) == "a=1"
    assert kc.edit_cmdline("\n", args("a=1"), []) == "a=1\n"
    assert kc.edit_cmdline("", [], args("a")) == ""


def test_init_arguments_after_double_dash_are_untouched():
    text = "ro quiet -- quiet single"
    assert kc.edit_cmdline(text, args("nohibernate"), args("quiet")) == "ro nohibernate -- quiet single"
    assert kc.edit_cmdline("-- x", args("a"), []) == "a -- x"


def test_removing_everything_and_leading_tokens():
    assert kc.edit_cmdline("a b c\n", [], args("a", "b", "c")) == "\n"
    assert kc.edit_cmdline("a b c", [], args("a", "b")) == "c"
    assert kc.edit_cmdline("  a  b  c\n", [], args("b")) == "  a  c\n"


@pytest.mark.parametrize(
    "bad, fragment",
    [
        ("", "empty"),
        (" a", "whitespace"),
        ("a b", "single plain tokens"),
        ("--", "init"),
        ('a="b c"', "quotes"),
        ("a=$(reboot)", "metacharacters"),
        ("=1", "no name"),
        (3, "expected a string"),
    ],
)
def test_bad_requested_arguments_are_rejected_clearly(bad, fragment):
    with pytest.raises(kc.CmdlineError, match=fragment):
        kc.parse_arg(bad)


names = st.sampled_from(["a", "b", "kvm_intel.tdx", "kvm-intel.tdx", "quiet", "iommu", "console"])
values = st.one_of(st.none(), st.sampled_from(["0", "1", "pt", "ttyS0"]))
token_st = st.builds(lambda n, v: n if v is None else f"{n}={v}", names, values)
# Existing command lines may hold quoted values with spaces; requests never do.
existing_st = st.one_of(token_st, st.sampled_from(['dyndbg="file a.c +p"', '"quoted=x y"']))
seps = st.sampled_from([" ", "  ", "\t"])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(existing_st, seps)), st.lists(token_st, max_size=3), st.lists(names, max_size=2))
def test_edit_reaches_the_request_and_keeps_unrelated_tokens(existing, want, drop):
    text = "".join(tok + sep for tok, sep in existing)
    present = args(*want)
    # The last request for a name wins, so only those are expected to hold together.
    present = list({t.key: t for t in present}.values())
    absent = [a for a in args(*drop) if a.key not in {p.key for p in present}]
    result = kc.edit_cmdline(text, present, absent)
    raws = [t.raw for t in tokenize(result)]
    assert kc.satisfied(raws, present, absent)
    touched = {t.key for t in present + absent}
    unrelated_before = [t.raw for t in tokenize(text) if t.key not in touched]
    assert [t.raw for t in tokenize(result) if t.key not in touched] == unrelated_before
    assert kc.edit_cmdline(result, present, absent) == result


# -------------------------------------------------------------------------------------------- detection


def test_detection_order_and_unknown_setup_names_what_was_found(tmp_path):
    root = str(tmp_path)
    with pytest.raises(kc.CmdlineError) as err:
        kc.plan(HostReader(root), ["a"], [])
    message = str(err.value)
    assert "/etc/default/grub absent" in message and "grubby not found" in message
    tree(tmp_path, {"/boot/loader/entries/x.conf": BLS_ENTRY.format(ver="6.8", extra="")})
    with pytest.raises(kc.CmdlineError, match=r"1 \*\.conf"):
        kc.plan(HostReader(root), ["a"], [])
    tree(tmp_path, {"/etc/kernel/cmdline": "ro\n"})
    assert kc.detect_setup(HostReader(root))[0] == "kernel_install"
    tree(tmp_path, {"/etc/default/grub": DEBIAN_GRUB})
    assert kc.detect_setup(HostReader(root))[0] == "grub"
    tree(tmp_path, {}, executables=["/usr/sbin/grubby"])
    assert kc.detect_setup(HostReader(root))[0] == "bls"
    tree(tmp_path, {"/run/ostree-booted": ""})
    assert kc.detect_setup(HostReader(root))[0] == "ostree"


def test_conflicting_request_and_bad_name(tmp_path):
    root = tree(tmp_path, {"/etc/kernel/cmdline": "ro\n"})
    with pytest.raises(kc.CmdlineError, match="both present and absent"):
        kc.plan(HostReader(root), ["a=1"], ["a"])
    with pytest.raises(kc.CmdlineError, match="file-name stem"):
        kc.plan(HostReader(root), ["a"], [], name="../etc/evil")
    with pytest.raises(kc.CmdlineError, match="unknown boot setup"):
        kc.plan(HostReader(root), ["a"], [], setup="lilo")


# -------------------------------------------------------------------------------------------- GRUB


def grub_root(tmp_path, extra=None, tools=("/usr/sbin/update-grub",)):
    return tree(tmp_path, {"/etc/default/grub": DEBIAN_GRUB, **(extra or {})}, executables=tools)


def test_grub_dropin_created_conflict_removed_and_rest_kept_byte_for_byte(tmp_path):
    root = grub_root(tmp_path)
    result = kc.plan(HostReader(root), ["kvm_intel.tdx=1", "nohibernate"], [], name="90-tdx-host")
    assert [a.kind for a in result.actions] == ["write", "write", "command"]
    assert result.actions[-1].argv == ["/usr/sbin/update-grub"]
    calls = []
    executor = apply_plan(root, result, calls=calls)
    assert calls == [["chroot", root, "/usr/sbin/update-grub"]]
    main = (tmp_path / "etc/default/grub").read_text()
    assert main == DEBIAN_GRUB.replace(" kvm_intel.tdx=0", "")
    dropin = (tmp_path / "etc/default/grub.d/90-tdx-host.cfg").read_text()
    assert 'GRUB_CMDLINE_LINUX="${GRUB_CMDLINE_LINUX} kvm_intel.tdx=1 nohibernate"\n' in dropin
    assert result.configured == [
        "console=tty0",
        "console=ttyS0,115200n8",
        "kvm_intel.tdx=1",
        "nohibernate",
        "quiet",
        "splash",
    ]
    assert result.before[-1] == "splash" and "kvm_intel.tdx=0" in result.before
    # The original main file survives as a backup; the new drop-in had nothing to back up.
    assert [os.path.basename(b).split(".")[0] for b in executor.backups] == ["grub"]
    assert Path(executor.backups[0]).read_text() == DEBIAN_GRUB
    again = kc.plan(HostReader(root), ["kvm_intel.tdx=1", "nohibernate"], [], name="90-tdx-host")
    assert again.actions == [] and again.configured == result.configured


def test_grub_separate_dropins_do_not_fight(tmp_path):
    root = grub_root(tmp_path)
    apply_plan(root, kc.plan(HostReader(root), ["kvm_intel.tdx=1"], [], name="90-tdx-host"))
    apply_plan(root, kc.plan(HostReader(root), ["intel_iommu=on"], [], name="91-iommu"))
    assert kc.plan(HostReader(root), ["kvm_intel.tdx=1"], [], name="90-tdx-host").actions == []
    final = kc.plan(HostReader(root), [], [], name="91-iommu").configured
    assert "kvm_intel.tdx=1" in final and "intel_iommu=on" in final


def test_grub_absent_from_main_file_and_own_dropin_removed_when_empty(tmp_path):
    root = grub_root(tmp_path)
    apply_plan(root, kc.plan(HostReader(root), ["nohibernate"], [], name="tee"))
    result = kc.plan(HostReader(root), [], ["nohibernate", "quiet"], name="tee")
    kinds = sorted((a.kind, a.path or "") for a in result.actions)
    assert kinds == [
        ("command", ""),
        ("remove", "/etc/default/grub.d/tee.cfg"),
        ("write", "/etc/default/grub"),
    ]
    apply_plan(root, result)
    assert not (tmp_path / "etc/default/grub.d/tee.cfg").exists()
    assert 'GRUB_CMDLINE_LINUX_DEFAULT="splash"' in (tmp_path / "etc/default/grub").read_text()


def test_grub_check_mode_reports_but_changes_nothing(tmp_path):
    root = grub_root(tmp_path)
    result = kc.plan(HostReader(root), ["nohibernate"], ["console"], name="tee")
    calls = []
    executor = apply_plan(root, result, check_mode=True, calls=calls)
    assert calls == [] and executor.backups == []
    assert [d["kind"] for d in executor.done] == ["write", "write", "command"]
    assert (tmp_path / "etc/default/grub").read_text() == DEBIAN_GRUB
    assert not (tmp_path / "etc/default/grub.d").exists()


def test_grub_argument_next_to_a_variable_is_removed_where_it_is_written(tmp_path):
    root = grub_root(tmp_path, {"/etc/default/grub.d/50-cloud.cfg": 'GRUB_CMDLINE_LINUX_DEFAULT="$EXTRA iommu=pt"\n'})
    result = kc.plan(HostReader(root), [], ["iommu"], name="tee")
    assert [a.path for a in result.actions if a.kind == "write"] == ["/etc/default/grub.d/50-cloud.cfg"]
    assert result.actions[0].content == 'GRUB_CMDLINE_LINUX_DEFAULT="$EXTRA"\n'
    assert "iommu=pt" not in result.configured


def test_grub_argument_produced_by_shell_code_is_refused_naming_the_file(tmp_path):
    cloud = 'PT=iommu=pt\nGRUB_CMDLINE_LINUX_DEFAULT="$GRUB_CMDLINE_LINUX_DEFAULT $PT"\n'
    root = grub_root(tmp_path, {"/etc/default/grub.d/50-cloud.cfg": cloud})
    with pytest.raises(kc.CmdlineError, match=r"comes from /etc/default/grub.d/50-cloud.cfg.*by hand"):
        kc.plan(HostReader(root), [], ["iommu=pt"], name="tee")
    assert (tmp_path / "etc/default/grub.d/50-cloud.cfg").read_text() == cloud


def test_grub_later_dropin_overriding_ours_fails_with_the_culprit(tmp_path):
    root = grub_root(tmp_path, {"/etc/default/grub.d/99-site.cfg": 'GRUB_CMDLINE_LINUX="console=ttyS0"\n'})
    with pytest.raises(kc.CmdlineError, match=r"sourced after .*10-tee.cfg \(/etc/default/grub.d/99-site.cfg\)"):
        kc.plan(HostReader(root), ["nohibernate"], [], name="10-tee")
    assert kc.plan(HostReader(root), ["nohibernate"], [], name="zz-tee").actions


def test_grub_single_quotes_and_unquoted_values(tmp_path):
    root = tree(
        tmp_path,
        {"/etc/default/grub": "GRUB_CMDLINE_LINUX='ro iommu=pt'\nGRUB_CMDLINE_LINUX_DEFAULT=quiet\n"},
        executables=["/usr/sbin/grub-mkconfig"],
    )
    result = kc.plan(HostReader(root), [], ["iommu", "quiet"], name="tee")
    assert result.actions[-1].argv == ["/usr/sbin/grub-mkconfig", "-o", "/boot/grub/grub.cfg"]
    apply_plan(root, result)
    assert (tmp_path / "etc/default/grub").read_text() == "GRUB_CMDLINE_LINUX='ro'\nGRUB_CMDLINE_LINUX_DEFAULT=\n"


def test_grub_without_update_tool_warns(tmp_path):
    root = grub_root(tmp_path, tools=())
    result = kc.plan(HostReader(root), ["nohibernate"], [], name="tee")
    assert [a.kind for a in result.actions] == ["write"]
    assert "update-grub" in result.warnings[0]


# -------------------------------------------------------------------------------------------- BLS


def bls_root(tmp_path, extra_new="kvm_amd.sev=0", extra_old=""):
    return tree(
        tmp_path,
        {
            "/boot/loader/entries/abc-6.8.5-301.fc40.x86_64.conf": BLS_ENTRY.format(ver="6.8.5", extra=extra_old),
            "/boot/loader/entries/abc-6.9.7-200.fc40.x86_64.conf": BLS_ENTRY.format(ver="6.9.7", extra=extra_new),
            "/etc/default/grub": 'GRUB_CMDLINE_LINUX="rhgb quiet"\n',
        },
        executables=["/usr/bin/grubby"],
    )


def test_bls_uses_grubby_for_all_entries_and_backs_them_up(tmp_path):
    root = bls_root(tmp_path)
    result = kc.plan(HostReader(root), ["kvm_amd.sev=1", "nohibernate"], ["rhgb"])
    commands = [a.argv for a in result.actions if a.kind == "command"]
    assert commands == [
        ["/usr/bin/grubby", "--update-kernel=ALL", "--remove-args=rhgb kvm_amd.sev=0"],
        ["/usr/bin/grubby", "--update-kernel=ALL", "--args=kvm_amd.sev=1 nohibernate"],
    ]
    # Both entries are written as grubby leaves them first; grubby then keeps its other files in step.
    assert [a.kind for a in result.actions] == ["write", "write", "command", "command"]
    assert result.configured == ["root=UUID=0b1c", "ro", "quiet", "kvm_amd.sev=1", "nohibernate"]
    calls = []
    executor = apply_plan(root, result, calls=calls)
    assert calls == [["chroot", root, *argv] for argv in commands]
    # Two entries and /etc/default/grub, each copied once, before the first grubby call.
    assert len(executor.backups) == 3
    assert sorted(os.path.basename(b).rsplit(".", 1)[0] for b in executor.backups)[0].startswith("abc-6.8.5")


def test_bls_nothing_to_do_when_every_entry_has_it(tmp_path):
    root = bls_root(tmp_path, extra_new="nohibernate", extra_old="nohibernate")
    assert kc.plan(HostReader(root), ["nohibernate"], ["iommu"]).actions == []


def test_bls_rhel8_kernelopts_are_resolved(tmp_path):
    root = tree(
        tmp_path,
        {
            "/boot/loader/entries/r-4.18.conf": "title RHEL\nversion 4.18\noptions $kernelopts\n",
            "/boot/grub2/grubenv": "saved_entry=r\nkernelopts=root=/dev/vda1 ro nohibernate\n",
        },
        executables=["/usr/sbin/grubby"],
    )
    result = kc.plan(HostReader(root), ["nohibernate"], [])
    assert result.actions == [] and "nohibernate" in result.configured


# -------------------------------------------------------------------------------------------- kernel-install


def test_kernel_install_edits_file_and_regenerates_entry(tmp_path):
    root = tree(
        tmp_path,
        {
            "/etc/kernel/cmdline": "root=UUID=1 ro  quiet kvm_intel.tdx=0\n",
            "/proc/sys/kernel/osrelease": "6.12.0-tdx\n",
            "/usr/lib/modules/6.12.0-tdx/vmlinuz": "",
        },
        executables=["/usr/bin/kernel-install"],
    )
    (tmp_path / "etc/kernel/cmdline").chmod(0o600)
    result = kc.plan(HostReader(root), ["kvm_intel.tdx=1", "nohibernate"], [])
    assert result.actions[1].argv == [
        "/usr/bin/kernel-install",
        "add",
        "6.12.0-tdx",
        "/usr/lib/modules/6.12.0-tdx/vmlinuz",
    ]
    executor = apply_plan(root, result, calls=[])
    path = tmp_path / "etc/kernel/cmdline"
    assert path.read_text() == "root=UUID=1 ro  quiet kvm_intel.tdx=1 nohibernate\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # the atomic rename kept the mode
    assert Path(executor.backups[0]).read_text() == "root=UUID=1 ro  quiet kvm_intel.tdx=0\n"
    assert not [n for n in os.listdir(tmp_path / "etc/kernel") if n.startswith(".tee-")]


@pytest.mark.parametrize("with_initrd", [True, False])
def test_kernel_install_on_debian_passes_the_boot_image_and_its_initramfs(tmp_path, with_initrd):
    # Debian 12 keeps the image in /boot and builds the initramfs itself (initramfs-tools): its own hook runs
    # kernel-install add <release> /boot/vmlinuz-<release> /boot/initrd.img-<release>.
    files = {
        "/etc/kernel/cmdline": "root=UUID=1 ro quiet\n",
        "/proc/sys/kernel/osrelease": "6.1.0-50-amd64\n",
        "/boot/vmlinuz-6.1.0-50-amd64": "",
        "/etc/machine-id": "0123456789abcdef0123456789abcdef\n",
        # systemd-boot installed on the ESP (bootctl install): kernel-install's $BOOT is /boot/efi, its layout bls.
        "/boot/efi/loader/entries.srel": "type1\n",
        "/boot/efi/loader/entries/0123456789abcdef0123456789abcdef-6.1.0-49-amd64.conf": "options ro\n",
    }
    if with_initrd:
        files["/boot/initrd.img-6.1.0-50-amd64"] = ""
    root = tree(tmp_path, files, executables=["/usr/bin/kernel-install"])
    result = kc.plan(HostReader(root), ["nohibernate"], [])
    initrd = ["/boot/initrd.img-6.1.0-50-amd64"] if with_initrd else []
    assert result.actions[1].argv == [
        "/usr/bin/kernel-install",
        "add",
        "6.1.0-50-amd64",
        "/boot/vmlinuz-6.1.0-50-amd64",
        *initrd,
    ]
    assert result.warnings == []


def test_kernel_install_without_tool_warns_and_empty_file_gets_newline(tmp_path):
    root = tree(tmp_path, {"/etc/kernel/cmdline": ""})
    result = kc.plan(HostReader(root), ["nohibernate"], [])
    assert result.actions[0].content == "nohibernate\n"
    assert "kernel-install add" in result.warnings[0]


def test_failed_command_restores_every_file_and_says_so(tmp_path):
    root = grub_root(tmp_path)
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    with pytest.raises(kc.CmdlineError, match=r"update-grub failed with exit code 1: boom; every file .* restored"):
        apply_plan(root, kc.plan(HostReader(root), ["nohibernate"], [], name="tee"), rc=1)
    # The drop-in written before update-grub failed is gone again, and so is every backup of this run.
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before


def test_commands_under_another_root_go_through_chroot(tmp_path):
    root = grub_root(tmp_path)
    calls = []
    apply_plan(root, kc.plan(HostReader(root), ["nohibernate"], [], name="tee"), calls=calls)
    assert calls == [["chroot", str(tmp_path), "/usr/sbin/update-grub"]]
    executor = kc.Executor(HostReader("/"), True, None)
    assert executor.command_argv(["/usr/sbin/update-grub"]) == ["/usr/sbin/update-grub"]


# -------------------------------------------------------------------------------------------- ostree


def ostree_root(tmp_path, tools):
    return tree(
        tmp_path,
        {
            "/run/ostree-booted": "",
            "/boot/loader/entries/ostree-1-fcos.conf": "version 1\noptions root=x ro kvm_intel.tdx=0\n",
            "/boot/loader/entries/ostree-2-fcos.conf": "version 2\noptions root=y iommu=pt kvm_intel.tdx=0\n",
        },
        executables=tools,
    )


def test_ostree_uses_rpm_ostree_kargs_on_the_default_deployment(tmp_path):
    root = ostree_root(tmp_path, ["/usr/bin/rpm-ostree"])
    result = kc.plan(HostReader(root), ["kvm_intel.tdx=1"], ["iommu"])
    assert result.actions[0].argv == [
        "/usr/bin/rpm-ostree",
        "kargs",
        "--delete-if-present=iommu=pt",
        "--delete-if-present=kvm_intel.tdx=0",
        "--append-if-missing=kvm_intel.tdx=1",
    ]
    assert result.before == ["root=y", "iommu=pt", "kvm_intel.tdx=0"]


def test_bootc_without_rpm_ostree_explains_kargs_d(tmp_path):
    root = ostree_root(tmp_path, ["/usr/bin/bootc"])
    with pytest.raises(kc.CmdlineError, match=r"kargs\.d"):
        kc.plan(HostReader(root), ["kvm_intel.tdx=1"], [])


# -------------------------------------------------------------------------------------------- running


def test_reboot_required_compares_request_with_running(tmp_path):
    assert kc.reboot_required(["ro", "kvm_intel.tdx=1"], ["kvm_intel.tdx=1"], []) is False
    assert kc.reboot_required(["ro", "tdx=1"], ["kvm_intel.tdx=1"], []) is True
    assert kc.reboot_required(["iommu=pt"], [], ["iommu"]) is True
    assert kc.reboot_required(None, ["a"], []) is False
    tree(tmp_path, {"/proc/cmdline": "BOOT_IMAGE=/vmlinuz ro quiet\n"})
    assert kc.running_cmdline(HostReader(str(tmp_path))) == ["BOOT_IMAGE=/vmlinuz", "ro", "quiet"]


def test_unreadable_file_is_a_clear_error(tmp_path):
    (tmp_path / "etc/default").mkdir(parents=True)
    (tmp_path / "etc/default/grub").mkdir()  # a directory where a file belongs
    with pytest.raises(kc.CmdlineError, match=r"cannot read .*etc/default/grub"):
        kc.plan(HostReader(str(tmp_path)), ["a"], [], setup="grub")


def test_ostree_nothing_to_do_needs_no_tool(tmp_path):
    root = ostree_root(tmp_path, [])
    result = kc.plan(HostReader(root), ["kvm_intel.tdx=0"], ["nohibernate"])
    assert result.actions == [] and result.setup == "ostree"


def test_remove_action_backs_up_and_diff_has_the_old_content(tmp_path):
    root = grub_root(tmp_path)
    apply_plan(root, kc.plan(HostReader(root), ["nohibernate"], [], name="tee"))
    result = kc.plan(HostReader(root), [], ["nohibernate"], name="tee")
    remove = next(a for a in result.actions if a.kind == "remove")
    assert "nohibernate" in remove.before
    executor = apply_plan(root, result)
    assert any(b.startswith(str(tmp_path / "etc/default/grub.d/tee.cfg.")) for b in executor.backups)


# -------------------------------------------------------------------------------------------- issue 7: GRUB is shell

SHELL_GRUB = """GRUB_DEFAULT=0
GRUB_CMDLINE_LINUX_DEFAULT="quiet foo=\\"a b\\""
GRUB_CMDLINE_LINUX="console=tty0 \\
  kvm_intel.tdx=0 iommu=pt,nomerge"   # serial console
GRUB_CMDLINE_LINUX="${GRUB_CMDLINE_LINUX:+$GRUB_CMDLINE_LINUX }mitigations=auto
  nosmt"
"""


def applied(root, result, calls=None):
    executor = apply_plan(root, result, calls=calls if calls is not None else [])
    kc.verify(result, executor)
    return executor


def test_grub_shell_forms_are_planned_from_the_evaluated_value(tmp_path):
    root = grub_root(tmp_path, {"/etc/default/grub": SHELL_GRUB})
    result = kc.plan(HostReader(root), ["kvm_intel.tdx=1", "nohibernate"], ["foo", "iommu=pt,nomerge"], name="90-tdx")
    assert result.before == [
        "console=tty0",
        "kvm_intel.tdx=0",
        "iommu=pt,nomerge",
        "mitigations=auto",
        "nosmt",
        "quiet",
        'foo="a b"',
    ]
    assert result.configured == ["console=tty0", "mitigations=auto", "nosmt", "kvm_intel.tdx=1", "nohibernate", "quiet"]
    applied(root, result)
    again = kc.plan(HostReader(root), ["kvm_intel.tdx=1", "nohibernate"], ["foo", "iommu=pt,nomerge"], name="90-tdx")
    assert again.actions == [] and again.configured == result.configured


def test_grub_absent_on_a_continued_line_really_removes_it(tmp_path):
    root = grub_root(tmp_path, {"/etc/default/grub": SHELL_GRUB})
    result = kc.plan(HostReader(root), [], ["nosmt"], name="tee")
    assert result.changed and "nosmt" not in result.configured
    applied(root, result)
    assert "nosmt" not in kc.plan(HostReader(root), [], [], name="tee").configured


def test_grub_present_never_leaves_two_values(tmp_path):
    main = 'GRUB_CMDLINE_LINUX="kvm-intel.tdx=0"\nGRUB_CMDLINE_LINUX_DEFAULT="kvm_intel.tdx=0 quiet"\n'
    root = grub_root(tmp_path, {"/etc/default/grub": main})
    result = kc.plan(HostReader(root), ["kvm_intel.tdx=1"], [], name="tee")
    assert [raw for raw in result.configured if "tdx" in raw] == ["kvm_intel.tdx=1"]
    applied(root, result)


def test_grub_file_that_fails_in_the_shell_is_a_clear_error(tmp_path):
    root = grub_root(tmp_path, {"/etc/default/grub.d/50-bad.cfg": 'GRUB_CMDLINE_LINUX="unterminated\n'})
    with pytest.raises(kc.CmdlineError, match="update-grub would fail as well"):
        kc.plan(HostReader(root), ["nohibernate"], [], name="tee")


def test_grub_fifo_in_grub_d_is_refused_not_sourced(tmp_path):
    root = grub_root(tmp_path)
    (tmp_path / "etc/default/grub.d").mkdir()
    os.mkfifo(tmp_path / "etc/default/grub.d/50-pipe.cfg")
    with pytest.raises(kc.CmdlineError, match=r"FIFO.*would fail or hang"):
        kc.plan(HostReader(root), ["nohibernate"], [], name="tee")


def test_grub_bytes_that_are_not_utf8_survive_an_edit(tmp_path):
    root = grub_root(tmp_path)
    (tmp_path / "etc/default/grub").write_bytes(b'# caf\xe9\nGRUB_CMDLINE_LINUX="ro iommu=pt"\n')
    applied(root, kc.plan(HostReader(root), [], ["iommu"], name="tee"))
    assert (tmp_path / "etc/default/grub").read_bytes() == b'# caf\xe9\nGRUB_CMDLINE_LINUX="ro"\n'


def test_grub_dropin_edited_by_hand_is_refused(tmp_path):
    root = grub_root(tmp_path, {"/etc/default/grub.d/tee.cfg": 'GRUB_CMDLINE_LINUX="mine"\n'})
    with pytest.raises(kc.CmdlineError, match="changed by hand"):
        kc.plan(HostReader(root), ["nohibernate"], [], name="tee")


# -------------------------------------------------------------------------------------------- issue 7: symlinks


def test_symlinked_grub_file_is_written_through(tmp_path):
    root = grub_root(tmp_path)
    (tmp_path / "srv").mkdir()
    real = tmp_path / "srv/grub"
    real.write_text('GRUB_CMDLINE_LINUX="ro iommu=pt"\n')
    (tmp_path / "etc/default/grub").unlink()
    (tmp_path / "etc/default/grub").symlink_to("/srv/grub")  # absolute, inside host_root
    executor = applied(root, kc.plan(HostReader(root), [], ["iommu"], name="tee"))
    assert (tmp_path / "etc/default/grub").is_symlink()
    assert real.read_text() == 'GRUB_CMDLINE_LINUX="ro"\n'
    assert [Path(b).parent for b in executor.backups] == [tmp_path / "srv"]


def test_symlinked_kernel_cmdline_is_written_through(tmp_path):
    root = tree(tmp_path, {"/usr/lib/kernel/cmdline": "root=x ro\n"})
    (tmp_path / "etc/kernel").mkdir(parents=True)
    (tmp_path / "etc/kernel/cmdline").symlink_to("../../usr/lib/kernel/cmdline")
    applied(root, kc.plan(HostReader(root), ["nohibernate"], []))
    assert (tmp_path / "etc/kernel/cmdline").is_symlink()
    assert (tmp_path / "usr/lib/kernel/cmdline").read_text() == "root=x ro nohibernate\n"


# -------------------------------------------------------------------------------------------- issue 7: BLS


def grubby_bls(root):
    """A runner that edits the entries like modern grubby-bls: --remove-args drops exact words only."""

    def run(argv):
        argv = argv[2:] if argv[0] == "chroot" else argv
        options = dict(arg.split("=", 1) for arg in argv[1:])
        for entry in (Path(root) / "boot/loader/entries").glob("*.conf"):
            lines = entry.read_text().splitlines(keepends=True)
            for i, line in enumerate(lines):
                if line.startswith("options "):
                    words = [w for w in line.split()[1:] if w not in options.get("--remove-args", "").split()]
                    for new in options.get("--args", "").split():
                        key = new.split("=", 1)[0]
                        words = [w for w in words if w.split("=", 1)[0] != key] + [new]
                    lines[i] = "options " + " ".join(words) + "\n"
            entry.write_text("".join(lines))
        return 0, "", ""

    return run


def test_bls_removes_the_dash_spelling_that_is_really_there(tmp_path):
    root = bls_root(tmp_path, extra_new="kvm-intel.tdx=0", extra_old="kvm-intel.tdx=0")
    result = kc.plan(HostReader(root), ["kvm_intel.tdx=1"], [])
    assert next(a.argv for a in result.actions if a.kind == "command")[-1] == "--remove-args=kvm-intel.tdx=0"
    executor = kc.Executor(HostReader(root), False, grubby_bls(root))
    executor.execute(result)
    kc.verify(result, executor)
    assert kc.plan(HostReader(root), ["kvm_intel.tdx=1"], []).actions == []


def test_bls_change_that_does_not_take_effect_is_rolled_back(tmp_path):
    root = bls_root(tmp_path)
    entries = sorted((tmp_path / "boot/loader/entries").glob("*.conf"))
    before = [entry.read_text() for entry in entries]

    def half_broken(argv):
        entries[0].write_text(entries[0].read_text().replace("options ", "options broken "))
        return 0, "", ""  # claims success, changes the wrong thing

    result = kc.plan(HostReader(root), ["kvm_amd.sev=1"], [])
    executor = kc.Executor(HostReader(root), False, half_broken)
    executor.execute(result)
    with pytest.raises(kc.CmdlineError, match=r"not as planned.*was restored"):
        kc.verify(result, executor)
    assert [entry.read_text() for entry in entries] == before


def test_failed_bls_edit_leaves_no_backup_and_no_stray_directory(tmp_path):
    root = bls_root(tmp_path)
    before = {str(p): (p.read_bytes() if p.is_file() else None) for p in tmp_path.rglob("*")}
    entries = sorted((tmp_path / "boot/loader/entries").glob("*.conf"))

    def grubby_fails_half_way(argv):
        entries[0].write_text(entries[0].read_text().replace("options ", "options half-done "))
        return 1, "", "grubby: error writing entry"

    result = kc.plan(HostReader(root), ["kvm_amd.sev=1"], ["rhgb"])
    executor = kc.Executor(HostReader(root), False, grubby_fails_half_way)
    with pytest.raises(kc.CmdlineError, match=r"grubby .*exit code 1: grubby: error writing entry; every file"):
        executor.execute(result)
    assert executor.backups == []
    assert {str(p): (p.read_bytes() if p.is_file() else None) for p in tmp_path.rglob("*")} == before


def test_bls_entry_with_two_options_lines_is_refused(tmp_path):
    root = bls_root(tmp_path, extra_new="a\noptions b")
    with pytest.raises(kc.CmdlineError, match=r"2 'options' lines.*Merge them"):
        kc.plan(HostReader(root), ["nohibernate"], [])


def test_running_arguments_returned_are_only_the_managed_ones():
    running = ["BOOT_IMAGE=/vmlinuz", "iscsi_initiator=secret", "kvm-intel.tdx=0", "nohibernate"]
    assert kc.managed_running(running, ["kvm_intel.tdx=1"], ["iommu"]) == ["kvm-intel.tdx=0"]
    assert kc.managed_running(None, ["a"], []) is None


# -------------------------------------------------------------------------------------------- generated GRUB files

WORDS = st.sampled_from(
    [
        "quiet",
        "ro",
        "kvm_intel.tdx=0",
        "kvm-intel.tdx=1",
        "nohibernate",
        "iommu=pt",
        "iommu=pt,nomerge",
        "console=ttyS0",
    ]
)


def shell_word(words, style):
    """One way a shell file can spell a value holding ``words`` (the shell must evaluate it back)."""
    text = " ".join(words)
    if style == "double":
        return '"' + text + '"'
    if style == "single":
        return "'" + text + "'"
    if style == "continued":
        return '"' + " \\\n  ".join(words) + '"'
    if style == "multiline":
        return '"' + "\n".join(words) + '"'
    return '"${GRUB_CMDLINE_LINUX:+$GRUB_CMDLINE_LINUX }' + text + '"'


grub_file = st.lists(
    st.tuples(
        st.sampled_from(["GRUB_CMDLINE_LINUX", "GRUB_CMDLINE_LINUX_DEFAULT"]),
        st.lists(WORDS, max_size=4),
        st.sampled_from(["double", "single", "continued", "multiline", "expansion"]),
    ),
    min_size=1,
    max_size=3,
).map(lambda lines: "".join(f"{var}={shell_word(words, style)}\n" for var, words, style in lines))
requests = st.tuples(
    st.lists(st.sampled_from(["kvm_intel.tdx=1", "nohibernate", "iommu=nomerge"]), max_size=2, unique=True),
    st.lists(st.sampled_from(["quiet", "iommu=pt", "console", "iommu=pt,nomerge"]), max_size=2, unique=True),
)


def apply_generated(root_path, main, dropin, request):
    """Plan, apply and re-read one generated configuration; returns "refused" or "applied"."""
    present, absent = request
    absent = [a for a in absent if a.split("=")[0] not in {p.split("=")[0] for p in present}]
    files = {"/etc/default/grub": main, **({"/etc/default/grub.d/50-site.cfg": dropin} if dropin else {})}
    root = tree(root_path, files, executables=["/usr/sbin/update-grub"])
    try:
        result = kc.plan(HostReader(root), present, absent, name="90-tee")
    except kc.CmdlineError as error:
        # Refusing is allowed (shell the module does not rewrite); the message must say where.
        assert "/etc/default/grub" in str(error)
        return "refused"
    applied(root, result)
    effective = kc.plan(HostReader(root), [], [], name="90-tee").configured
    assert kc.satisfied(effective, args(*present), args(*absent)), (effective, present, absent)
    assert kc.plan(HostReader(root), present, absent, name="90-tee").actions == []  # idempotent
    return "applied"


def test_generated_grub_files_never_report_success_without_the_effect(tmp_path_factory):
    outcomes = Counter()

    @settings(max_examples=80, deadline=None)
    @given(main=grub_file, dropin=st.one_of(st.none(), grub_file), request=requests)
    def one_configuration(main, dropin, request):
        outcomes[apply_generated(tmp_path_factory.mktemp("grub"), main, dropin, request)] += 1

    one_configuration()
    # Refusals must stay the exception, not the rule: a module that refuses everything is never wrong.
    assert outcomes["applied"] > 2 * outcomes["refused"], outcomes
