"""emit.systemd: values and command lines read back through systemd's own parser, or are refused by name."""

import shutil
import subprocess

import pytest
from ansible_collections.confidential.tee.plugins.module_utils.attestation.dcap_version import (
    parse_dcap_version,
    qgs_behaviour,
)
from ansible_collections.confidential.tee.plugins.module_utils.attestation.qgs_config import (
    DROPIN_PATH,
    SOCKET_ACCESS_HELPER,
    VSOCK_UNIT_PATH,
    QgsConfigError,
    qgs_plan,
)
from ansible_collections.confidential.tee.plugins.module_utils.common.emit import EmitError, systemd
from hypothesis import given, settings
from hypothesis import strategies as st

# systemd's WHITESPACE (src/basic/string-util.h): what it strips around keys and values, nothing else.
WHITESPACE = " \t\n\r"
ANALYZE = shutil.which("systemd-analyze")
needs_analyze = pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze is not installed (apt-get install systemd)")
# Control characters, blanks, quotes, backslashes, specifiers, variables, separators and unicode.
HOSTILE = st.text(st.sampled_from(list("ab0/ -_.\"'\\%$;#=\n\r\t\x00\x01\x7fé€{}")) | st.characters(), max_size=12)


def _has_control(text):
    """What no unit file can carry: C0 controls, DEL, and lone surrogates (not UTF-8 at all)."""
    return any(
        ord(ch) < 0x20
        or ord(ch) == 0x7F
        or 0xD800 <= ord(ch) <= 0xDFFF
        or 0xFDD0 <= ord(ch) <= 0xFDEF
        or (ord(ch) & 0xFFFE) == 0xFFFE
        for ch in text
    )


def _verify(tmp_path, body, name="emit-test.service"):
    """systemd-analyze's warnings for a unit file: unknown keys, bad escapes and lines without '=' go to stderr."""
    unit = tmp_path / name
    unit.write_text(body)
    result = subprocess.run([ANALYZE, "verify", str(unit)], capture_output=True, text=True, check=False)
    return [line for line in result.stderr.splitlines() if line.strip()]


def _settings(text):
    """``(section, key, value)`` per systemd.syntax(7): comments and blank lines skipped, split at the first '='."""
    section, found = None, []
    for line in text.split("\n"):
        stripped = line.strip(WHITESPACE)
        if not stripped or stripped[0] in "#;":
            continue
        if stripped.startswith("["):
            section = stripped[1:-1]
            continue
        key, _equals, value = stripped.partition("=")
        found.append((section, key.strip(WHITESPACE), value.strip(WHITESPACE)))
    return found


@settings(max_examples=15, deadline=None)
@given(st.lists(st.lists(HOSTILE, min_size=0, max_size=4), min_size=1, max_size=15))
def test_exec_args_are_one_word_each_or_refused(tmp_path_factory, batch):
    lines = []
    for args in batch:
        argv = ["/bin/true", *args]
        try:
            rendered = systemd.exec_args(argv, "socket_group")
        except EmitError as exc:
            assert "socket_group" in str(exc)
            assert any(_has_control(a) or a == ";" for a in args)
            continue
        assert "\n" not in rendered and systemd.split_exec(rendered) == argv
        lines.append("ExecStartPre=" + rendered)
    if ANALYZE and lines:
        body = "[Service]\nType=oneshot\nExecStart=/bin/true\n" + "\n".join(lines) + "\n"
        assert _verify(tmp_path_factory.mktemp("unit"), body) == []


@settings(max_examples=15, deadline=None)
@given(st.lists(HOSTILE, min_size=1, max_size=15))
def test_values_read_back_or_are_refused(tmp_path_factory, texts):
    accepted = []
    for text in texts:
        try:
            rendered = systemd.value(text, "description")
        except EmitError as exc:
            assert "description" in str(exc)
            assert _has_control(text) or text.endswith("\\") or text != text.strip(" \t")
            continue
        assert rendered.replace("%%", "%") == text
        accepted.append("Description=" + rendered)
    # Each accepted value is one setting whose value, specifiers undone, is the text itself.
    assert [("Unit", "Description", line[len("Description=") :]) for line in accepted] == _settings(
        "[Unit]\n" + "\n".join(accepted)
    )
    if ANALYZE and accepted:
        body = "[Unit]\n" + "\n".join(accepted) + "\n[Service]\nExecStart=/bin/true\n"
        assert _verify(tmp_path_factory.mktemp("unit"), body) == []


V126 = qgs_behaviour(parse_dcap_version("1.26"))


@pytest.mark.parametrize("group", ["qgsd 0777 x", "a\nExecStartPre=/bin/sh", 'q"s', "100%", "$HOME", "a\\"])
def test_a_hostile_socket_group_stays_one_argument_or_is_refused(tmp_path, group):
    # Two walls: qgs_plan refuses what is not a group name (QgsConfigError), and the systemd emitter would quote
    # or refuse it anyway (EmitError); either way it names the variable and never reaches the unit.
    try:
        plan = qgs_plan(V126, "unix", ["kata"], socket_group=group)
    except (EmitError, QgsConfigError) as exc:
        assert "socket_group" in str(exc)
        return
    dropin = plan.files[DROPIN_PATH]
    found = _settings(dropin)
    assert [key for _section, key, _value in found] == [
        "RuntimeDirectory",
        "RuntimeDirectoryMode",
        "UMask",
        "ExecStartPost",
    ]
    command = found[-1][2]
    assert command.startswith("+")
    assert systemd.split_exec(command[1:]) == [SOCKET_ACCESS_HELPER, "/var/run/tdx-qgs/qgs.socket", group, "0660", "30"]
    if ANALYZE:
        # The helper is not installed here: /bin/true stands in so that only parse warnings remain.
        body = "[Service]\nExecStart=/bin/true\n" + dropin.replace(SOCKET_ACCESS_HELPER, "/bin/true")
        assert _verify(tmp_path, body) == []


@pytest.mark.parametrize("qgs_dir", ["/opt/intel/tdx qgs", "/opt/%n", "/opt/$x", "/opt/a\nUser=root", "opt/rel"])
def test_a_hostile_qgs_dir_is_quoted_or_refused(tmp_path, qgs_dir):
    try:
        plan = qgs_plan(V126, "both", ["kata"], qgs_dir=qgs_dir)
    except EmitError as exc:
        assert "qgs_dir" in str(exc) and ("\n" in qgs_dir or not qgs_dir.startswith("/"))
        return
    unit = plan.files[VSOCK_UNIT_PATH]
    found = {key: value for _section, key, value in _settings(unit)}
    assert found["User"] == "qgsd" and found["WorkingDirectory"].replace("%%", "%") == qgs_dir
    assert systemd.split_exec(found["ExecStart"]) == [qgs_dir + "/qgs", "--no-daemon", "-p=4050"]
    if ANALYZE:
        warnings = _verify(tmp_path, unit.replace(systemd.exec_args([qgs_dir + "/qgs"], "x"), "/bin/true"))
        assert [w for w in warnings if "WorkingDirectory" not in w] == []


def test_ordinary_units_are_unchanged():
    plan = qgs_plan(V126, "unix", ["kubevirt"])
    assert f"ExecStartPost=+{SOCKET_ACCESS_HELPER} /var/run/tdx-qgs/qgs.socket 107 0660 30\n" in plan.files[DROPIN_PATH]


@needs_analyze
def test_systemd_analyze_reports_what_the_emitter_prevents(tmp_path):
    """The oracle works: an unknown escape and a line without '=' are warnings on stderr."""
    assert len(_verify(tmp_path, '[Service]\nExecStart=/bin/true "a\\q"\nbad line\n')) == 2
