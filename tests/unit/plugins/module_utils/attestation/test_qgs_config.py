"""qgs_config: qgs.conf read the way each QGS release reads it, the file and units written for a request."""

from __future__ import annotations

import pytest
from ansible_collections.confidential.tee.plugins.module_utils.attestation.dcap_version import (
    DcapVersion,
    qgs_behaviour,
)
from ansible_collections.confidential.tee.plugins.module_utils.attestation.qgs_config import (
    DROPIN_PATH,
    VSOCK_UNIT_PATH,
    QgsConfigError,
    effective_qgs,
    qgs_plan,
    render_qgs_conf,
    strtoul,
)

V123, V124, V126 = (qgs_behaviour(DcapVersion(1, minor)) for minor in (23, 24, 26))
UNIX, V4050 = ("unix", None), ("vsock", 4050)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("4050", (4050, "", False)),
        ("+7", (7, "", False)),
        ("", (0, "", False)),
        ("0x10", (0, "x10", False)),
        ("12ab", (12, "ab", False)),
        ("abc", (0, "abc", False)),
        ("-1", (2**64 - 1, "", False)),
        ("-0", (0, "", False)),
        ("9" * 30, (2**64 - 1, "", True)),
    ],
)
def test_strtoul_like_glibc(value, expected):
    assert strtoul(value) == expected


# (file, meaning before 1.24, meaning on 1.24-1.25, meaning on 1.26+); None: QGS exits at start.
CASES = [
    (None, UNIX, UNIX, UNIX),
    ("", UNIX, UNIX, UNIX),
    ("#port = 4050\nnumber_threads = 4\n", UNIX, UNIX, UNIX),
    ("port = 4050\n", V4050, V4050, V4050),
    ("port = 0\n", UNIX, ("vsock", 0), ("vsock", 0)),
    ("port=0\nport = 4050\n", V4050, V4050, V4050),
    ("port = 4050\nport = 0\n", V4050, ("vsock", 0), ("vsock", 0)),
    ("port = 4050\nport = 5000\n", V4050, ("vsock", 5000), ("vsock", 5000)),
    ("  p o r t\t=\t40 50\r\n", V4050, V4050, V4050),
    ("port =\n", UNIX, None, None),
    ("port = 70000\n", ("vsock", 70000), None, None),
    ("port = 4294967296\n", None, None, None),
    ("port = -1\n", None, None, None),
    ("port = 4050 # vsock\n", None, None, None),
    ("port: 4050\n", UNIX, UNIX, UNIX),
    ("Port = 4050\n", UNIX, UNIX, UNIX),
    ("= 4050\n", None, None, None),
    ("number_threads = 256\n", None, None, None),
    ("number_threads = 8\nport = 4050\n", V4050, V4050, V4050),
    ("# a comment = with equals\nport = 4051\n", ("vsock", 4051), ("vsock", 4051), ("vsock", 4051)),
]


@pytest.mark.parametrize(("text", "pre", "mid", "new"), CASES)
def test_each_release_reads_the_file_as_its_server_main_does(text, pre, mid, new):
    for behaviour, expected in ((V123, pre), (V124, mid), (V126, new)):
        effective = effective_qgs(text, behaviour)
        got = None if effective.transport is None else (effective.transport, effective.port)
        assert got == expected, (behaviour.era, text, effective.describe())


def test_fatal_lines_are_named():
    effective = effective_qgs("number_threads = 4\nport = 4050 # vsock\n", V126)
    assert effective.transport is None and effective.fatal_line == 2
    assert "QGS exits at start (line 2)" in effective.describe() and "'4050#vsock'" in effective.describe()


def test_value_cut_at_255_characters_like_the_buffer():
    # strncpy into char value[256]: the digit that makes it invalid is beyond the buffer, so QGS accepts it.
    assert effective_qgs("port = " + "0" * 251 + "4050" + "x\n", V126).port == 4050


@pytest.mark.parametrize(
    ("argv", "behaviour", "expected"),
    [
        (["-p=5000"], V126, ("vsock", 5000)),
        (["-p=0"], V126, ("vsock", 0)),
        (["--no-daemon", "-n=4"], V126, V4050),
        (["-p=0"], V123, UNIX),
        (["-p=5000"], V123, ("vsock", 5000)),
    ],
)
def test_command_line_overrides(argv, behaviour, expected):
    effective = effective_qgs("port = 4050\n" if behaviour is V126 else "", behaviour, argv)
    assert (effective.transport, effective.port) == expected


def test_before_124_a_command_line_port_skips_the_files_port_lines():
    # The file is read only for values still 0: an invalid port line no longer matters.
    assert effective_qgs("port = nonsense\n", V123, ["-p=4050"]).port == 4050
    assert effective_qgs("port = nonsense\n", V126, ["-p=4050"]).transport is None


@pytest.mark.parametrize("argv", [["-p=x"], ["-p=70000"], ["--verbose"], ["-n=300"]])
def test_bad_flags_stop_qgs(argv):
    assert effective_qgs("", V126, argv).transport is None


@pytest.mark.parametrize("behaviour", [V123, V124, V126])
@pytest.mark.parametrize(("transport", "expected"), [("unix", UNIX), ("both", UNIX), ("vsock", ("vsock", 5001))])
def test_rendered_file_means_the_request_on_every_release(behaviour, transport, expected):
    text = render_qgs_conf(behaviour, transport, 5001, 8)
    effective = effective_qgs(text, behaviour)
    assert (effective.transport, effective.port, effective.threads) == (*expected, 8)


def test_plan_for_kubevirt_and_kata_on_one_socket():
    plan = qgs_plan(V126, "unix", ["kubevirt", "kata"])
    assert plan.socket_group == "107" and plan.socket_mode == 0o660 and plan.socket_dir_mode == 0o755
    assert [c["name"] for c in plan.clients] == ["kubevirt", "kata"]
    dropin = plan.files[DROPIN_PATH]
    assert "RuntimeDirectory=tdx-qgs" in dropin and "UMask=0077" in dropin
    assert "qgs-socket-access /var/run/tdx-qgs/qgs.socket 107 0660 30" in dropin
    assert VSOCK_UNIT_PATH not in plan.files and plan.units == ["qgsd.service"]


def test_plan_both_adds_a_vsock_qgs():
    plan = qgs_plan(V124, "both", ["kubevirt", "kata"], vsock_port=4050, threads=4)
    unit = plan.files[VSOCK_UNIT_PATH]
    assert "ExecStart=/opt/intel/tdx-qgs/qgs --no-daemon -p=4050 -n=4" in unit and "User=qgsd" in unit
    assert effective_qgs(plan.files["/etc/qgs.conf"], V124).transport == "unix"
    assert effective_qgs(plan.files["/etc/qgs.conf"], V124, ["--no-daemon", "-p=4050", "-n=4"]).port == 4050
    assert [listener["transport"] for listener in plan.listeners] == ["unix", "vsock"]
    assert any("vsock_loopback" in warning for warning in plan.warnings)


def test_plan_kata_only_keeps_the_qgsd_group():
    assert qgs_plan(V126, "unix", ["kata"]).socket_group == "qgsd"


def test_low_vsock_port_gets_the_capability():
    plan = qgs_plan(V126, "vsock", ["kata"], vsock_port=1023)
    assert "AmbientCapabilities=CAP_NET_BIND_SERVICE" in plan.files[DROPIN_PATH]
    assert any("4050" in warning for warning in plan.warnings)


@pytest.mark.parametrize(
    ("behaviour", "transport", "consumers", "port", "fragment"),
    [
        (V126, "vsock", ["kubevirt"], 4050, "KubeVirt passes only a Unix socket path"),
        (V126, "tcp", ["kata"], 4050, "transport must be one of"),
        (V126, "unix", [], 4050, "non-empty list"),
        (V126, "unix", ["libvirt"], 4050, "non-empty list"),
        (V123, "vsock", ["kata"], 0, "port = 0 selects the Unix socket"),
        (V126, "vsock", ["kata"], 70000, "out of range"),
        (V126, "vsock", ["kata"], True, "must be an integer"),
    ],
)
def test_impossible_requests_refused(behaviour, transport, consumers, port, fragment):
    with pytest.raises(QgsConfigError) as raised:
        qgs_plan(behaviour, transport, consumers, vsock_port=port)
    assert fragment in str(raised.value)


def test_thread_count_checked():
    with pytest.raises(QgsConfigError, match=r"0\.\.255"):
        qgs_plan(V126, "unix", ["kata"], threads=300)


@pytest.mark.parametrize("group", ["qgsd 0777 x", "a\nExecStartPre=/bin/sh", "kvm;id", "%n", "-x", "a" * 40, "grp\x00"])
def test_a_socket_group_that_is_not_a_group_name_is_refused_naming_the_option(group):
    # The option, for the module's action plugin to name the role variable (tdx_attestation_qgs_socket_group).
    with pytest.raises(QgsConfigError, match=r"^socket_group ") as refused:
        qgs_plan(V126, "unix", ["kubevirt"], socket_group=group)
    assert refused.value.option == "socket_group"


@pytest.mark.parametrize("group", ["qgsd", "kvm", "_x", "svc-qemu.1", "107", "machine$"])
def test_group_names_and_gids_pass(group):
    plan = qgs_plan(V126, "unix", ["kubevirt"], socket_group=group)
    assert plan.socket_group == group


V114, V115, V118, V119 = (qgs_behaviour(DcapVersion(1, minor)) for minor in (14, 15, 18, 19))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", None),  # 1.14 has no Unix socket: no port is fatal
        ("port = 0\n", None),
        ("port = 4050\n", V4050),
        ("port = 4050\nport = 4051\n", ("vsock", 4051)),  # every line read: the last wins
        ("port = 4050\nport = 0\n", None),
        ("port = 4050\nnumber_threads = x\n", V4050),  # no thread setting: the value is never looked at
    ],
)
def test_dcap_114_reads_vsock_only(text, expected):
    effective = effective_qgs(text, V114)
    got = None if effective.transport is None else (effective.transport, effective.port)
    assert got == expected, effective.describe()


def test_dcap_114_has_no_thread_flag():
    assert effective_qgs("port = 4050\n", V114, ["-n=4"]).transport is None
    assert effective_qgs("", V114, ["-p=4050"]).port == 4050


def test_value_cut_differs_by_release():
    # 1.15 to 1.18 hand the whole value to strtoul: the 'x' past 255 characters is fatal there, cut off from 1.19.
    text = "port = " + "0" * 251 + "4050" + "x\n"
    for behaviour in (V115, V118):
        assert effective_qgs(text, behaviour).transport is None
    for behaviour in (V119, V123, V124, V126):
        assert effective_qgs(text, behaviour).port == 4050


@pytest.mark.parametrize(
    ("behaviour", "transport", "threads", "fragment"),
    [
        (qgs_behaviour(DcapVersion(1, 12)), "vsock", None, "ships no QGS"),
        (V114, "unix", None, "vsock only"),
        (V114, "both", None, "vsock only"),
        (V114, "vsock", 4, "no thread setting"),
    ],
)
def test_plan_refuses_what_the_release_cannot_do(behaviour, transport, threads, fragment):
    with pytest.raises(QgsConfigError) as raised:
        qgs_plan(behaviour, transport, ["kata"], threads=threads)
    assert fragment in str(raised.value)


def test_plan_for_dcap_114_vsock_writes_a_port():
    plan = qgs_plan(V114, "vsock", ["kata"])
    assert effective_qgs(plan.files["/etc/qgs.conf"], V114).port == 4050
    with pytest.raises(QgsConfigError):
        qgs_plan(V114, "vsock", ["kata"], vsock_port=0)


@pytest.mark.parametrize(
    ("consumers", "kata", "transport", "serves"),
    [
        (["kubevirt"], None, "unix", {"unix": ["kubevirt"]}),
        (["kata"], "3.31.0", "vsock", {"vsock": ["kata"]}),
        (["kata"], "v3.32.1", "unix", {"unix": ["kata"]}),
        (["kubevirt", "kata"], "3.32.0", "unix", {"unix": ["kubevirt", "kata"]}),
        (["kubevirt", "kata"], "3.31.0", "both", {"unix": ["kubevirt"], "vsock": ["kata"]}),
        (["kubevirt", "kata"], "", "both", {"unix": ["kubevirt", "kata"], "vsock": ["kata"]}),
    ],
)
def test_auto_transport_per_consumer_version(consumers, kata, transport, serves):
    plan = qgs_plan(V126, "auto", consumers, kata_version=kata)
    assert plan.transport == transport
    assert {item["transport"]: item["serves"] for item in plan.listeners} == serves
    assert (VSOCK_UNIT_PATH in plan.files) is (transport == "both")


@pytest.mark.parametrize(
    ("transport", "consumers", "kata", "fragment"),
    [
        ("unix", ["kata"], "3.31.0", "asks QGS on vsock port 4050"),
        ("vsock", ["kata"], "3.32.0", "asks QGS on the Unix socket"),
        ("vsock", ["kubevirt"], None, "only a Unix socket path"),
        ("auto", ["kata"], "three", "not a Kata Containers release"),
    ],
)
def test_explicit_transport_a_consumer_cannot_use_is_refused(transport, consumers, kata, fragment):
    with pytest.raises(QgsConfigError) as raised:
        qgs_plan(V126, transport, consumers, kata_version=kata)
    assert fragment in str(raised.value)
