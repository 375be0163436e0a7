"""The kernel_cmdline module driven through main(), with run_command mocked (no real update-grub)."""

from __future__ import annotations

import json

import pytest
import yaml
from ansible.module_utils import basic
from ansible_collections.confidential.tee.plugins.module_utils.boot import kernel_cmdline as kc
from ansible_collections.confidential.tee.plugins.modules import kernel_cmdline

GRUB = 'GRUB_DEFAULT=0\nGRUB_CMDLINE_LINUX_DEFAULT="quiet"\nGRUB_CMDLINE_LINUX="console=ttyS0 iommu=pt"\n'


@pytest.fixture
def module_result(run_module, monkeypatch):
    """run_module (tests/unit/plugins/modules/conftest.py) with run_command recorded instead of run."""
    calls = []

    def run_command(self, argv, **kwargs):
        calls.append(list(argv))
        return 0, "", ""

    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)

    def run(args, failed=False, check_mode=False):
        result = run_module(kernel_cmdline, args, check_mode=check_mode)
        assert result["failed"] is failed, result.get("msg")
        result["_calls"] = list(calls)
        calls.clear()
        json.dumps({k: v for k, v in result.items() if k != "exception"})  # results must be JSON
        return result

    return run


def grub_tree(tmp_path, running="BOOT_IMAGE=/vmlinuz ro quiet\n"):
    (tmp_path / "etc/default").mkdir(parents=True)
    (tmp_path / "etc/default/grub").write_text(GRUB)
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/cmdline").write_text(running)
    tool = tmp_path / "usr/sbin/update-grub"
    tool.parent.mkdir(parents=True)
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    return str(tmp_path)


def test_converge_then_idempotent(tmp_path, module_result):
    root = grub_tree(tmp_path)
    request = {"host_root": root, "present": ["kvm_intel.tdx=1", "nohibernate"], "name": "90-tdx-host"}
    first = module_result(request)
    assert first["changed"] is True and first["setup"] == "grub"
    assert first["reboot_required"] is True
    assert first["_calls"] == [["chroot", root, "/usr/sbin/update-grub"]]
    assert first["configured"] == ["console=ttyS0", "iommu=pt", "kvm_intel.tdx=1", "nohibernate", "quiet"]
    assert first["running"] == []  # only managed names are returned: the rest may carry credentials
    assert first["configured_facts"]["nohibernate"] is True and first["configured_facts"]["verdict"]["tdx"]["ready"]
    assert first["changes"]["backups"] == first["backups"] == []  # only a new drop-in was written
    assert first["changes"]["written"] == [f"{root}/etc/default/grub.d/90-tdx-host.cfg"]
    assert first["changes"]["commands"] == [a["description"] for a in first["actions"] if a["kind"] == "command"]
    second = module_result(request)
    assert second["changed"] is False and second["_calls"] == []
    assert second["changes"]["written"] == second["changes"]["commands"] == second["actions"] == []
    assert second["reboot_required"] is True  # still not running what is configured


def test_check_mode_and_diff_change_nothing(tmp_path, module_result):
    root = grub_tree(tmp_path)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    result = module_result(
        {
            "host_root": root,
            "present": ["nohibernate"],
            "absent": ["iommu"],
            "_ansible_diff": True,
            "name": "tee",
        },
        check_mode=True,
    )
    assert result["changed"] is True and result["_calls"] == []
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before
    assert [a["kind"] for a in result["actions"]] == ["write", "write", "command"]
    assert result["changes"]["written"] == [f"{root}/etc/default/grub", f"{root}/etc/default/grub.d/tee.cfg"]
    assert len(result["changes"]["commands"]) == 1 and result["changes"]["backups"] == []
    token_diff = result["diff"][0]
    assert token_diff["before"] == "console=ttyS0\niommu=pt\nquiet\n"
    assert token_diff["after"] == "console=ttyS0\nnohibernate\nquiet\n"
    file_diffs = {d["after_header"]: d for d in result["diff"][1:]}
    assert file_diffs[f"{root}/etc/default/grub"]["after"] == GRUB.replace(" iommu=pt", "")
    assert "nohibernate" in file_diffs[f"{root}/etc/default/grub.d/tee.cfg"]["after"]


def test_running_kernel_already_has_it(tmp_path, module_result):
    root = grub_tree(tmp_path, running="ro quiet kvm_intel.tdx=1\n")
    result = module_result({"host_root": root, "present": ["kvm_intel.tdx=1"]})
    assert result["changed"] is True and result["reboot_required"] is False


def test_backup_disabled(tmp_path, module_result):
    root = grub_tree(tmp_path)
    result = module_result({"host_root": root, "absent": ["iommu"], "backup": False})
    assert result["changed"] is True and result["changes"]["backups"] == result["backups"] == []
    assert not list((tmp_path / "etc/default").glob("grub.*~"))


def test_unknown_boot_setup_fails_naming_what_was_found(tmp_path, module_result):
    result = module_result({"host_root": str(tmp_path), "present": ["nohibernate"]}, failed=True)
    assert "no supported boot setup" in result["msg"] and "/etc/default/grub absent" in result["msg"]


def test_bad_argument_and_bad_root_fail_clearly(tmp_path, module_result):
    root = grub_tree(tmp_path)
    result = module_result({"host_root": root, "present": ["a b"]}, failed=True)
    assert "single plain tokens" in result["msg"]
    result = module_result({"host_root": str(tmp_path / "missing")}, failed=True)
    assert "is not a directory" in result["msg"]


def test_explicit_boot_setup_with_missing_file(tmp_path, module_result):
    root = grub_tree(tmp_path)
    result = module_result({"host_root": root, "present": ["a"], "boot_setup": "kernel_install"}, failed=True)
    assert "/etc/kernel/cmdline, which is missing" in result["msg"]


@pytest.mark.parametrize("option", ["present", "absent"])
def test_a_string_where_a_list_belongs_is_refused_not_split(tmp_path, module_result, option):
    root = grub_tree(tmp_path)
    result = module_result({"host_root": root, option: "iommu=pt,nomerge"}, failed=True)
    assert result["msg"].startswith(f"{option} must be a list, got the string 'iommu=pt,nomerge'")
    assert not (tmp_path / "etc/default/grub.d").exists()


def test_diff_of_a_latin1_file_is_shown_and_the_change_reported(tmp_path, module_result):
    # Issue 7, defect 5: a Latin-1 byte broke --diff after the file had been written.
    root = grub_tree(tmp_path)
    (tmp_path / "etc/default/grub").write_bytes(b"# caf\xe9\n" + GRUB.encode())
    result = module_result({"host_root": root, "absent": ["iommu"], "_ansible_diff": True})
    assert result["changed"] is True and result["_calls"] == [["chroot", root, "/usr/sbin/update-grub"]]
    main_diff = next(d for d in result["diff"] if d["after_header"].endswith("/etc/default/grub"))
    assert main_diff["before"].startswith("# caf\\xe9\n")
    assert (tmp_path / "etc/default/grub").read_bytes().startswith(b"# caf\xe9\n")
    again = module_result({"host_root": root, "absent": ["iommu"], "_ansible_diff": True})
    assert again["changed"] is False


def test_configured_facts_carry_the_snp_remedy(tmp_path, module_result):
    root = grub_tree(tmp_path)
    (tmp_path / "etc/default/grub").write_text('GRUB_CMDLINE_LINUX="iommu=nomerge,pt"\n')
    result = module_result({"host_root": root}, check_mode=True)
    facts = result["configured_facts"]
    assert facts["iommu"]["passthrough"] is True and not facts["verdict"]["snp"]["ready"]
    assert facts["iommu_passthrough_remedy"] == {
        "needed": True,
        "present": ["iommu=nomerge"],
        "absent": ["iommu=nomerge,pt"],
    }


REQUESTS = [
    {"name": "90-tdx", "present": ["kvm_intel.tdx=1", "nohibernate"]},
    {"name": "91-iommu", "present": ["intel_iommu=on"], "absent": ["iommu"]},
]


def test_requests_check_mode_diff_then_one_update(tmp_path, module_result):
    root = grub_tree(tmp_path)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    planned = module_result({"host_root": root, "requests": REQUESTS, "_ansible_diff": True}, check_mode=True)
    assert planned["changed"] is True and planned["_calls"] == []
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before
    assert [d["after_header"] for d in planned["diff"][1:]] == [
        f"{root}/etc/default/grub",
        f"{root}/etc/default/grub.d/90-tdx.cfg",
        f"{root}/etc/default/grub.d/91-iommu.cfg",
    ]
    applied = module_result({"host_root": root, "requests": REQUESTS, "_ansible_diff": True})
    assert applied["_calls"] == [["chroot", root, "/usr/sbin/update-grub"]]  # one boot update for both
    assert applied["actions"] == planned["actions"] and applied["diff"] == planned["diff"]
    assert {k: v for k, v in applied["changes"].items() if k != "backups"} == {
        k: v for k, v in planned["changes"].items() if k != "backups"
    }
    assert applied["reboot_required"] is True
    assert sorted(applied["running"]) == []
    assert module_result({"host_root": root, "requests": REQUESTS})["changed"] is False


def test_requests_exclude_the_single_request_options(tmp_path, module_result):
    root = grub_tree(tmp_path)
    result = module_result({"host_root": root, "requests": REQUESTS, "present": ["x"]}, failed=True)
    assert "mutually exclusive" in result["msg"]
    bad = [REQUESTS[0], {"name": "91-iommu", "present": "intel_iommu=on"}]
    result = module_result({"host_root": root, "requests": bad}, failed=True)
    assert "requests[1] (91-iommu): present must be a list" in result["msg"]
    assert not (tmp_path / "etc/default/grub.d").exists()


def test_documented_boot_setups_are_the_registered_ones():
    """YAML cannot import the registry (boot/kernel_cmdline.py BOOT_SETUPS): the documented choices must follow it."""
    documented = yaml.safe_load(kernel_cmdline.DOCUMENTATION)["options"]["boot_setup"]["choices"]
    assert documented == ["auto", *kc.SETUPS]
    assert [setup.NAME for setup in kc.DETECTION_ORDER] == ["ostree", "bls", "grub", "kernel_install"]
    # Detection asks every registered setup once.
    assert sorted(kc.DETECTION_ORDER, key=lambda setup: kc.SETUPS.index(setup.NAME)) == list(kc.BOOT_SETUPS)
