"""dcap_version: release strings, the QGS version table, and where the installed release is read from."""

from __future__ import annotations

import pytest
from ansible_collections.confidential.tee.plugins.module_utils.attestation.dcap_version import (
    ERA_124,
    ERA_126,
    ERA_PRE_124,
    DcapVersion,
    DcapVersionError,
    detect_dcap_version,
    dpkg_package_version,
    parse_dcap_version,
    qgs_behaviour,
)
from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import HostReader


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1.26", DcapVersion(1, 26)),
        ("DCAP_1.24", DcapVersion(1, 24)),
        ("1.26.100.1-noble1", DcapVersion(1, 26)),
        ("1.23.100.2-1.el9", DcapVersion(1, 23)),
        (" 1.25 ", DcapVersion(1, 25)),
        (1.25, DcapVersion(1, 25)),
        ("1.21~git", DcapVersion(1, 21)),
    ],
)
def test_versions_read(text, expected):
    assert parse_dcap_version(text) == expected


@pytest.mark.parametrize("text", ["", "auto", "2.1", "1", "1.7", "1.100", "v1.26", "1.26a", None, True, ["1.26"]])
def test_versions_refused_with_the_way_to_write_them(text):
    with pytest.raises(DcapVersionError) as raised:
        parse_dcap_version(text)
    assert "1.26" in str(raised.value) or "1.8 to 1.99" in str(raised.value)


# The version table, one row per fact and release line (server_main.cpp of 1.23, 1.24/1.25 and 1.26).
@pytest.mark.parametrize(
    ("version", "era", "port_zero", "max_port", "duplicates", "empty_fatal", "creates_dir", "socket_mode", "group"),
    [
        ("1.15", ERA_PRE_124, "unix", 0xFFFFFFFF, "first-nonzero", False, None, None, None),
        ("1.23", ERA_PRE_124, "unix", 0xFFFFFFFF, "first-nonzero", False, None, None, None),
        ("1.24", ERA_124, "vsock", 0xFFFF, "last", True, 0o700, None, None),
        ("1.25", ERA_124, "vsock", 0xFFFF, "last", True, 0o700, None, None),
        ("1.26", ERA_126, "vsock", 0xFFFF, "last", True, 0o755, 0o660, "qgsd"),
        ("1.27", ERA_126, "vsock", 0xFFFF, "last", True, 0o755, 0o660, "qgsd"),
    ],
)
def test_version_table(version, era, port_zero, max_port, duplicates, empty_fatal, creates_dir, socket_mode, group):
    behaviour = qgs_behaviour(parse_dcap_version(version))
    assert behaviour.era == era
    assert behaviour.port_zero_means == port_zero
    assert behaviour.max_port == max_port
    assert behaviour.duplicate_lines == duplicates
    assert behaviour.empty_port_fatal is empty_fatal
    assert behaviour.creates_socket_dir_mode == creates_dir
    assert behaviour.socket_mode == socket_mode
    assert behaviour.client_group == group
    assert behaviour.cmdline_always_overrides is (era != ERA_PRE_124)


@pytest.mark.parametrize(("version", "umask"), [("1.23", None), ("1.25", None), ("1.26", 0o117), ("1.27", 0o077)])
def test_packaged_umask_breaks_the_cache_only_on_126(version, umask):
    assert qgs_behaviour(parse_dcap_version(version)).packaged_umask == umask


def test_packaged_conf_selects_vsock_until_126():
    assert qgs_behaviour(DcapVersion(1, 25)).packaged_conf_is_vsock
    assert not qgs_behaviour(DcapVersion(1, 26)).packaged_conf_is_vsock


STATUS = """Package: libsgx-dcap-default-qpl
Status: install ok installed
Version: 1.26.100.1-noble1

Package: tdx-qgs
Status: deinstall ok config-files
Version: 1.23.100.1-jammy1

Package: tdx-qgs
Status: install ok installed
Priority: optional
Description: Intel(R) TD Quoting Generation Service
 Version: 9.9 in a description line is not a field
Version: 1.26.100.1-noble1
"""


def test_dpkg_status_installed_stanza_only():
    assert dpkg_package_version(STATUS, "tdx-qgs") == "1.26.100.1-noble1"
    assert dpkg_package_version(STATUS, "sgx-dcap-pccs") is None
    assert (
        dpkg_package_version("Package: tdx-qgs\nStatus: deinstall ok config-files\nVersion: 1.2\n", "tdx-qgs") is None
    )


def test_detect_from_the_host_roots_dpkg_status(tmp_path):
    (tmp_path / "var/lib/dpkg").mkdir(parents=True)
    (tmp_path / "var/lib/dpkg/status").write_text(STATUS)
    version, source = detect_dcap_version(HostReader(str(tmp_path)))
    assert version == "1.26.100.1-noble1" and source.startswith("dpkg:")


def test_detect_says_why_when_nothing_is_installed(tmp_path):
    version, why = detect_dcap_version(HostReader(str(tmp_path)), timeout=5)
    assert version is None and "tdx-qgs is not installed" in why


# Issue 18: what each release can do at all, read per tag of Intel's source (server_main.cpp per DCAP_1.x tag).
@pytest.mark.parametrize(
    ("version", "has_qgs", "unix", "threads", "cut", "port_required"),
    [
        ("1.12", False, False, False, None, True),
        ("1.13", False, False, False, None, True),
        ("1.14", True, False, False, None, True),
        ("1.15", True, True, True, None, False),
        ("1.18", True, True, True, None, False),
        ("1.19", True, True, True, 255, False),
        ("1.23", True, True, True, 255, False),
        ("1.24", True, True, True, 255, False),
        ("1.26", True, True, True, 255, False),
        ("1.27", True, True, True, 255, False),
    ],
)
def test_capability_table_per_release(version, has_qgs, unix, threads, cut, port_required):
    behaviour = qgs_behaviour(parse_dcap_version(version))
    assert (behaviour.has_qgs, behaviour.unix_socket, behaviour.reads_threads) == (has_qgs, unix, threads)
    assert behaviour.value_cut == cut and behaviour.port_required is port_required
    assert (behaviour.release == version and "DCAP_" + version in behaviour.source) or version >= "1.26"


@pytest.mark.parametrize(
    ("version", "transport", "fragment"),
    [
        ("1.12", "unix", "ships no QGS"),
        ("1.12", "vsock", "ships no QGS"),
        ("1.14", "unix", "vsock only"),
        ("1.14", "both", "vsock only"),
        ("1.14", "vsock", None),
        ("1.15", "unix", None),
        ("1.26", "both", None),
    ],
)
def test_refusal_names_what_the_release_cannot_do(version, transport, fragment):
    refusal = qgs_behaviour(parse_dcap_version(version)).refusal(transport)
    if fragment is None:
        assert refusal is None
    else:
        assert fragment in refusal and "1.26" in refusal
