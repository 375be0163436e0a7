"""qgs_unit: qgsd.service merged the way systemd merges drop-ins, with Intel's DCAP 1.26/1.27 socket.conf."""

from __future__ import annotations

import pytest
from ansible_collections.confidential.tee.plugins.module_utils.attestation.dcap_files import PLANNERS, ComponentError
from ansible_collections.confidential.tee.plugins.module_utils.attestation.dcap_version import (
    DcapVersion,
    qgs_behaviour,
)
from ansible_collections.confidential.tee.plugins.module_utils.attestation.qgs_config import (
    DROPIN_PATH,
    SOCKET_ACCESS_HELPER,
    qgs_plan,
)
from ansible_collections.confidential.tee.plugins.module_utils.attestation.qgs_unit import (
    disagreement,
    merge_unit,
    parse_assignments,
    unit_problems,
)
from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import HostReader

# The package's unit (QuoteGeneration/quote_wrapper/qgs/qgsd.service) and the installer's drop-in per release.
PACKAGE_UNIT = "[Unit]\nDescription=QGS\n[Service]\nUser=qgsd\nType=forking\nExecStart=/opt/intel/tdx-qgs/qgs\n"
INTEL_126 = "[Service]\nRuntimeDirectory=tdx-qgs\nRuntimeDirectoryMode=0755\nUMask=0117\n"
INTEL_127 = INTEL_126.replace("0117", "0077")
OURS = qgs_plan(qgs_behaviour(DcapVersion(1, 26)), "unix", ["kubevirt", "kata"]).files[DROPIN_PATH]


@pytest.fixture
def tree(tmp_path):
    (tmp_path / "lib/systemd/system").mkdir(parents=True)
    (tmp_path / "lib/systemd/system/qgsd.service").write_text(PACKAGE_UNIT)
    (tmp_path / "etc/systemd/system/qgsd.service.d").mkdir(parents=True)
    return tmp_path


def merged_problems(root, planned=None):
    merged = merge_unit(HostReader(str(root)), planned=planned)
    return merged, unit_problems(merged, "unix", SOCKET_ACCESS_HELPER, True)


def test_intel_126_dropin_alone_breaks_the_cache_and_kubevirt(tree):
    (tree / "etc/systemd/system/qgsd.service.d/socket.conf").write_text(INTEL_126)
    merged, problems = merged_problems(tree)
    assert merged.fragment == "/lib/systemd/system/qgsd.service"
    assert any("UMask=0117 (from /etc/systemd/system/qgsd.service.d/socket.conf)" in p for p in problems)
    assert any("uid/gid 107" in p for p in problems)


@pytest.mark.parametrize("intel", [INTEL_126, INTEL_127])
def test_ours_composes_with_intels_socket_conf(tree, intel):
    (tree / "etc/systemd/system/qgsd.service.d/socket.conf").write_text(intel)
    merged, problems = merged_problems(tree, {DROPIN_PATH: OURS})
    assert problems == []
    # socket.conf sorts before zz-confidential-tee.conf: ours decides UMask, both name the runtime directory.
    assert merged.dropins[-1] == DROPIN_PATH and merged.last("UMask") == "0077"
    assert merged.origin["UMask"] == DROPIN_PATH and "tdx-qgs" in merged.settings["RuntimeDirectory"]


@pytest.mark.parametrize(
    ("name", "text", "fragment"),
    [
        ("zzz-admin.conf", "[Service]\nUMask=0117\n", "UMask=0117 (from /etc/systemd/system/qgsd.service.d/zzz"),
        ("zzz-admin.conf", "[Service]\nRuntimeDirectoryMode=0700\n", "unsearchable for others"),
        ("zzz-admin.conf", "[Service]\nExecStartPost=\n", "no ExecStartPost"),
        ("zzz-admin.conf", "[Service]\nRuntimeDirectory=\n", "no RuntimeDirectory=tdx-qgs"),
        ("zzz-admin.conf", "[Service]\nUMask=x\n", "not an octal mode"),
    ],
)
def test_a_later_dropin_that_undoes_ours_is_named(tree, name, text, fragment):
    (tree / "etc/systemd/system/qgsd.service.d" / name).write_text(text)
    _merged, problems = merged_problems(tree, {DROPIN_PATH: OURS})
    assert any(fragment in problem for problem in problems), problems


def test_same_name_in_an_earlier_directory_masks_the_later_one(tree):
    (tree / "usr/lib/systemd/system/qgsd.service.d").mkdir(parents=True)
    (tree / "usr/lib/systemd/system/qgsd.service.d/zzz.conf").write_text("[Service]\nUMask=0117\n")
    (tree / "etc/systemd/system/qgsd.service.d/zzz.conf").write_text("[Service]\nUMask=0077\n")
    merged, problems = merged_problems(tree, {DROPIN_PATH: OURS})
    assert merged.dropins == [DROPIN_PATH, "/etc/systemd/system/qgsd.service.d/zzz.conf"] and problems == []


def test_unit_in_etc_wins_over_the_package_one(tree):
    (tree / "etc/systemd/system/qgsd.service").write_text(PACKAGE_UNIT.replace("User=qgsd", "User=root"))
    merged, _problems = merged_problems(tree)
    assert merged.fragment == "/etc/systemd/system/qgsd.service" and merged.last("User") == "root"


def test_continuation_lines_comments_and_sections():
    text = "[Unit]\nUMask=0777\n[Service]\n# UMask=0117\n; x\nExecStartPost=/bin/a \\\n  b\nUMask=0077\n"
    assert parse_assignments(text) == [("ExecStartPost", "/bin/a  b"), ("UMask", "0077")]


def test_no_unit_installed_is_said():
    merged = merge_unit(HostReader("/nonexistent-root"))
    assert "not installed" in unit_problems(merged, "unix", None, False)[0]


def test_dcap_config_refuses_a_merge_that_undoes_our_dropin(tree):
    (tree / "etc/systemd/system/qgsd.service.d/socket.conf").write_text(INTEL_126)
    result = plan_qgs(tree)
    assert result.info["unit"]["verified"] and result.info["unit"]["umask"] == "0077"
    (tree / "etc/systemd/system/qgsd.service.d/zzz-site.conf").write_text("[Service]\nUMask=0117\n")
    with pytest.raises(ComponentError) as raised:
        plan_qgs(tree)
    assert "zzz-site.conf" in str(raised.value) and "UMask=0117" in str(raised.value)


def plan_qgs(root):
    params = {
        "dcap_version": "1.26", "transport": "unix", "consumers": ["kubevirt", "kata"], "vsock_port": 4050,
        "number_threads": None, "socket_group": None, "qgs_dir": "/opt/intel/tdx-qgs", "extra_clients": [],
    }  # fmt: skip
    return PLANNERS["qgs"](HostReader(str(root)), params)


def test_systemds_loaded_unit_must_agree_with_the_files(tree):
    (tree / "etc/systemd/system/qgsd.service.d/socket.conf").write_text(INTEL_126)
    merged, _problems = merged_problems(tree, {DROPIN_PATH: OURS})
    assert disagreement(merged, {"UMask": "0077", "NeedDaemonReload": "no"}) is None
    assert "daemon-reload" in disagreement(merged, {"UMask": "0077", "NeedDaemonReload": "yes"})
    assert "UMask=0117" in disagreement(merged, {"UMask": "0117", "NeedDaemonReload": "no"})
