"""The misc cgroup parser/reader against the kernel's formats and against every kind of bad input."""

from __future__ import annotations

import os

import pytest
from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import HostReader
from ansible_collections.confidential.tee.plugins.module_utils.host import misc_cgroup as mc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyfakefs.fake_filesystem import set_uid

V2 = "/sys/fs/cgroup"
V1 = "/sys/fs/cgroup/misc"


def write(fs, path: str, text: str | bytes) -> None:
    if isinstance(text, bytes):
        fs.create_file(path, contents=text)
    else:
        fs.create_file(path, contents=text.encode())


class TestParseText:
    def test_kernel_capacity_file(self):
        parsed = mc.parse_misc_text("sev 410\nsev_es 99\n")
        assert parsed.values == {"sev": 410, "sev_es": 99}
        assert parsed.issues == []

    def test_empty_file_means_no_capacity_anywhere(self):
        parsed = mc.parse_misc_text("")
        assert parsed.values == {} and parsed.issues == [] and parsed.readable

    def test_blank_lines_and_trailing_spaces_are_tolerated(self):
        parsed = mc.parse_misc_text("\n tdx 63  \n\n")
        assert parsed.values == {"tdx": 63}
        assert parsed.issues == []

    def test_max_only_in_misc_max(self):
        assert mc.parse_misc_text("tdx max\n", allow_max=True).values == {"tdx": mc.U64_MAX}
        parsed = mc.parse_misc_text("tdx max\n")
        assert parsed.values == {"tdx": None}
        assert "only valid in misc.max" in parsed.issues[0].problem

    @pytest.mark.parametrize(
        ("line", "problem"),
        [
            ("tdx abc", "not a decimal integer"),
            ("tdx 1.5", "not a decimal integer"),
            ("tdx -3", "negative value"),
            ("tdx 0x3f", "not a decimal integer"),
            (f"tdx {1 << 64}", "u64 range"),
        ],
    )
    def test_bad_values_are_unknown_not_guessed(self, line, problem):
        parsed = mc.parse_misc_text(line + "\n", path="/x/misc.capacity")
        assert parsed.values == {"tdx": None}
        assert problem in parsed.issues[0].problem
        assert parsed.issues[0].describe().startswith("/x/misc.capacity:1: ")

    def test_u64_max_itself_is_valid(self):
        assert mc.parse_misc_text(f"tdx {mc.U64_MAX}\n").values == {"tdx": mc.U64_MAX}

    def test_signed_files_reject_values_beyond_s64(self):
        parsed = mc.parse_misc_text(f"tdx {mc.S64_MAX + 1}\n", signed=True)
        assert parsed.values == {"tdx": None} and "s64" in parsed.issues[0].problem

    def test_minus_zero_in_signed_file_is_zero(self):
        assert mc.parse_misc_text("tdx -0\n", signed=True).values == {"tdx": 0}

    @pytest.mark.parametrize("line", ["tdx", "tdx 1 2", "TDX 1", "td-x 1", "tdx\t1\textra"])
    def test_malformed_lines_are_reported_and_skipped(self, line):
        parsed = mc.parse_misc_text(f"sev 1\n{line}\n")
        assert parsed.values.get("sev") == 1
        assert "tdx" not in parsed.values or parsed.values["tdx"] is None
        assert len(parsed.issues) == 1 and parsed.issues[0].line_number == 2

    def test_duplicate_with_same_value_keeps_value(self):
        parsed = mc.parse_misc_text("tdx 5\ntdx 5\n")
        assert parsed.values == {"tdx": 5}
        assert "duplicate" in parsed.issues[0].problem

    def test_duplicate_with_different_value_is_unknown(self):
        parsed = mc.parse_misc_text("tdx 5\ntdx 6\n")
        assert parsed.values == {"tdx": None}

    def test_binary_garbage_is_rejected_as_a_whole(self):
        parsed = mc.parse_misc_text(b"\xff\xfe tdx 3\n")
        assert parsed.values == {} and not parsed.readable
        assert "not ASCII" in parsed.issues[0].problem

    def test_nul_bytes_are_rejected(self):
        assert not mc.parse_misc_text("tdx 3\x00\n").readable

    def test_events_suffix(self):
        parsed = mc.parse_misc_text("sev.max 0\nsev_es.max 4\n", suffix=".max")
        assert parsed.values == {"sev": 0, "sev_es": 4}
        bad = mc.parse_misc_text("sev 0\n", suffix=".max")
        assert bad.values == {} and "ending in '.max'" in bad.issues[0].problem

    def test_unknown_resource_names_are_kept(self):
        assert mc.parse_misc_text("future_tee 7\n").values == {"future_tee": 7}


class TestCanonical:
    def test_snp_is_sev_es(self):
        assert mc.canonical_resource("snp") == "sev_es"
        assert mc.canonical_resource("sev_snp") == "sev_es"
        assert mc.canonical_resource("sev") == "sev"


class TestLocate:
    def test_cgroup_v2(self, fs):
        write(fs, f"{V2}/misc.capacity", "tdx 63\n")
        layout = mc.locate_misc(HostReader("/"))
        assert (layout.cgroup_version, layout.directory) == (2, V2)

    def test_cgroup_v1(self, fs):
        write(fs, f"{V1}/misc.capacity", "tdx 63\n")
        layout = mc.locate_misc(HostReader("/"))
        assert (layout.cgroup_version, layout.directory) == (1, V1)

    def test_host_root_prefix(self, fs):
        write(fs, f"/host{V2}/misc.capacity", "tdx 63\n")
        assert mc.locate_misc(HostReader("/host")).directory == f"/host{V2}"
        assert not mc.locate_misc(HostReader("/")).present

    def test_no_cgroup_filesystem(self, fs):
        layout = mc.locate_misc(HostReader("/"))
        assert not layout.present and "does not exist" in layout.reason

    def test_controller_not_in_kernel(self, fs):
        write(fs, f"{V2}/cgroup.controllers", "cpuset cpu io memory pids\n")
        layout = mc.locate_misc(HostReader("/"))
        assert not layout.present
        assert "cpuset cpu io memory pids" in layout.reason and "CONFIG_CGROUP_MISC" in layout.reason

    def test_the_misspelled_cgroups_path_is_not_used(self, fs):
        write(fs, "/sys/fs/cgroups/misc.capacity", "tdx 63\n")
        assert not mc.locate_misc(HostReader("/")).present


class TestReadState:
    def test_current_kernel_tdx(self, fs):
        write(fs, f"{V2}/misc.capacity", "tdx 63\n")
        write(fs, f"{V2}/misc.current", "sev 0\nsev_es 0\ntdx 5\n")
        write(fs, f"{V2}/misc.peak", "tdx 9\n")
        state = mc.read_misc_state(HostReader("/"))
        tdx = state.resource("tdx")
        assert (tdx.capacity, tdx.current, tdx.free, tdx.peak) == (63, 5, 58, 9)
        assert tdx.current_source == mc.SOURCE_ROOT and not tdx.current_is_lower_bound
        assert tdx.utilization == pytest.approx(7.94)
        assert state.issues == [] and state.notes == []
        assert set(state.resources) == {"tdx"}

    def test_snp_host(self, fs):
        write(fs, f"{V2}/misc.capacity", "sev 410\nsev_es 99\n")
        write(fs, f"{V2}/misc.current", "sev 3\nsev_es 12\n")
        state = mc.read_misc_state(HostReader("/"))
        assert state.resource("snp").name == "sev_es"
        assert (state.resource("snp").free, state.resource("sev").free) == (87, 407)

    def test_old_kernel_sums_top_level_children_as_lower_bound(self, fs):
        write(fs, f"{V2}/misc.capacity", "tdx 63\n")
        write(fs, f"{V2}/kubepods.slice/misc.current", "tdx 4\n")
        write(fs, f"{V2}/kubepods.slice/pod1/misc.current", "tdx 4\n")  # nested: already in its parent
        write(fs, f"{V2}/machine.slice/misc.current", "tdx 2\n")
        fs.create_dir(f"{V2}/user.slice")  # no misc files: not counted
        state = mc.read_misc_state(HostReader("/"))
        tdx = state.resource("tdx")
        assert (tdx.current, tdx.free) == (6, 57)
        assert tdx.current_is_lower_bound and tdx.as_dict()["free_is_upper_bound"]
        assert "sum of 2 top-level child cgroups" in state.notes[0] and "lower bound" in state.notes[0]

    def test_old_kernel_without_children_reports_zero_lower_bound(self, fs):
        write(fs, f"{V2}/misc.capacity", "tdx 63\n")
        tdx = mc.read_misc_state(HostReader("/")).resource("tdx")
        assert tdx.current == 0 and tdx.current_is_lower_bound

    def test_no_controller_is_a_fact(self, fs):
        fs.create_dir(V2)
        state = mc.read_misc_state(HostReader("/"))
        assert not state.layout.present and state.resources == {}

    def test_empty_capacity_means_no_resources(self, fs):
        write(fs, f"{V2}/misc.capacity", "")
        write(fs, f"{V2}/misc.current", "")
        state = mc.read_misc_state(HostReader("/"))
        assert state.layout.present and state.resources == {}

    def test_unreadable_current_is_unknown_usage(self, fs):
        write(fs, f"{V2}/misc.capacity", "tdx 63\n")
        fs.create_file(f"{V2}/misc.current", contents="tdx 5\n", st_mode=0o100000)
        set_uid(1000)
        try:
            state = mc.read_misc_state(HostReader("/"))
        finally:
            set_uid(0)
        tdx = state.resource("tdx")
        assert tdx.capacity == 63 and tdx.current is None and tdx.free is None
        assert tdx.current_source == mc.SOURCE_UNAVAILABLE
        assert any("unreadable: Permission denied" in issue.problem for issue in state.issues)

    def test_capacity_is_a_directory(self, fs):
        fs.create_dir(f"{V2}/misc.capacity")
        state = mc.read_misc_state(HostReader("/"))
        assert state.layout.present
        assert any("is a directory" in issue.problem for issue in state.issues)

    def test_capacity_directory_is_unknown_never_zero(self, fs):
        fs.create_dir(f"{V2}/misc.capacity")
        write(fs, f"{V2}/misc.current", "tdx 0\n")
        state = mc.read_misc_state(HostReader("/"))
        entry = state.entry("tdx")
        assert (entry.capacity, entry.free) == (None, None)

    @pytest.mark.parametrize(
        "data",
        [
            b"tdx 63\x00\n",
            b"\xef\xbb\xbftdx 63\n",  # UTF-8 BOM
            "tdx 63 caf\u00e9\n".encode("latin-1"),
            b"\x89PNG\r\n\x1a\n",
            b"tdx 63\n" * 20000,  # over 64 KiB
        ],
        ids=["nul", "bom", "latin1", "binary", "huge"],
    )
    def test_unreadable_capacity_is_unknown_never_zero(self, fs, data):
        write(fs, f"{V2}/misc.capacity", data)
        write(fs, f"{V2}/misc.current", "tdx 0\n")
        state = mc.read_misc_state(HostReader("/"))
        for name in ("tdx", "sev", "sev_es"):
            assert state.entry(name).capacity is None, name
        assert state.issues

    @pytest.mark.parametrize(
        ("line", "unknown", "known_zero"),
        [
            ("tdx 63 63", ["tdx"], ["sev", "sev_es"]),  # names tdx: only tdx is unknown
            ("sev ", ["sev"], ["tdx", "sev_es"]),
            ("tdx x", ["tdx"], ["sev", "sev_es"]),
            ("TDX 63", ["tdx", "sev", "sev_es"], []),  # names nothing this kernel prints: any could be it
            ("63", ["tdx", "sev", "sev_es"], []),
        ],
    )
    def test_a_line_that_does_not_parse_makes_its_resource_unknown(self, fs, line, unknown, known_zero):
        write(fs, f"{V2}/misc.capacity", line + "\n")
        write(fs, f"{V2}/misc.current", "")
        state = mc.read_misc_state(HostReader("/"))
        assert [name for name in ("tdx", "sev", "sev_es") if state.entry(name).capacity is None] == sorted(
            unknown, key=("tdx", "sev", "sev_es").index
        )
        assert all(state.entry(name).capacity == 0 for name in known_zero)

    def test_character_device_and_fifo_are_not_opened(self, tmp_path):
        base = tmp_path / V2.lstrip("/")
        base.mkdir(parents=True)
        os.mkfifo(base / "misc.capacity")
        (base / "misc.current").symlink_to("/dev/zero")  # absolute: resolved inside host_root, so absent
        state = mc.read_misc_state(HostReader(str(tmp_path)))
        assert state.entry("tdx").capacity is None
        assert "FIFO" in state.issues[0].problem

    def test_shapes_the_kernel_never_prints_are_accepted_with_a_note(self, fs):
        write(fs, f"{V2}/misc.capacity", "tdx\t063\r\n")
        write(fs, f"{V2}/misc.current", "tdx -0\n")
        state = mc.read_misc_state(HostReader("/"))
        tdx = state.resource("tdx")
        assert (tdx.capacity, tdx.current) == (63, 0)
        assert state.issues == []
        assert "not byte for byte what the kernel prints" in state.notes[0]

    def test_huge_file_is_rejected(self, fs):
        write(fs, f"{V2}/misc.capacity", "tdx 63\n" * 20000)
        state = mc.read_misc_state(HostReader("/"))
        assert state.resources == {} and "larger than" in state.issues[0].problem

    def test_usage_above_capacity_is_flagged_and_free_is_zero(self, fs):
        write(fs, f"{V2}/misc.capacity", "tdx 3\n")
        write(fs, f"{V2}/misc.current", "tdx 5\n")
        state = mc.read_misc_state(HostReader("/"))
        assert state.resource("tdx").free == 0
        assert "exceeds capacity" in state.issues[0].problem

    def test_missing_current_line_for_resource_with_capacity_is_unknown(self, fs):
        write(fs, f"{V2}/misc.capacity", "tdx 63\nsev 2\n")
        write(fs, f"{V2}/misc.current", "sev 0\n")
        state = mc.read_misc_state(HostReader("/"))
        assert state.resource("tdx").current is None
        assert "no 'tdx' line" in state.issues[0].problem

    def test_unknown_resources_are_kept_and_reported(self, fs):
        write(fs, f"{V2}/misc.capacity", "tdx 63\nfuture_tee 5\n")
        write(fs, f"{V2}/misc.current", "tdx 0\nfuture_tee 1\n")
        state = mc.read_misc_state(HostReader("/"))
        assert state.unknown_resources == ["future_tee"]
        assert state.resources["future_tee"].free == 4
        assert any("future_tee" in note for note in state.notes)

    def test_cgroup_walk(self, fs):
        write(fs, f"{V1}/misc.capacity", "sev_es 99\n")
        write(fs, f"{V1}/misc.current", "sev_es 3\n")
        write(fs, f"{V1}/machine/misc.current", "sev_es 3\n")
        write(fs, f"{V1}/machine/misc.max", "sev_es 3\n")
        write(fs, f"{V1}/machine/misc.events", "sev_es.max 2\n")
        write(fs, f"{V1}/machine/misc.events.local", "sev_es.max 2\n")
        write(fs, f"{V1}/machine/vm1/misc.current", "sev_es 3\n")
        write(fs, f"{V1}/machine/vm1/misc.max", "sev_es max\n")
        state = mc.read_misc_state(HostReader("/"), include_cgroups=True, cgroup_depth=1)
        assert [c.path for c in state.cgroups] == ["machine"]
        assert state.cgroups[0].as_dict()["events"] == {"sev_es": 2}
        deep = mc.read_misc_state(HostReader("/"), include_cgroups=True, cgroup_depth=2)
        assert [c.path for c in deep.cgroups] == ["machine", os.path.join("machine", "vm1")]
        assert deep.cgroups[1].as_dict()["max"] == {"sev_es": "max"}


# --- properties: hundreds of malformed files, no exception escapes, numbers exact ------------------------

names = st.sampled_from(["tdx", "sev", "sev_es", "misc_x"])
values = st.integers(min_value=0, max_value=mc.S64_MAX)


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(capacity=st.binary(max_size=200), current=st.binary(max_size=200))
def test_arbitrary_bytes_never_raise(fs, capacity, current):
    for path in list(fs.listdir("/")):
        fs.remove_object("/" + path)
    write(fs, f"{V2}/misc.capacity", capacity)
    write(fs, f"{V2}/misc.current", current)
    state = mc.read_misc_state(HostReader("/"), include_cgroups=True)
    for entry in state.resources.values():
        for number in (entry.capacity, entry.current, entry.free):
            assert number is None or (isinstance(number, int) and 0 <= number <= mc.U64_MAX)


@settings(max_examples=300)
@given(text=st.text(max_size=300))
def test_arbitrary_text_parses_without_raising(text):
    for kwargs in ({}, {"allow_max": True}, {"signed": True}, {"suffix": ".max"}):
        parsed = mc.parse_misc_text(text, **kwargs)
        assert all(v is None or isinstance(v, int) for v in parsed.values.values())


@settings(max_examples=300)
@given(table=st.dictionaries(names, values, max_size=4), junk=st.lists(st.sampled_from(["", " ", "x", "tdx"])))
def test_well_formed_lines_are_exact_even_among_junk(table, junk):
    lines = [f"{name} {value}" for name, value in table.items()] + [j for j in junk if j in ("", " ")]
    parsed = mc.parse_misc_text("\n".join(lines) + "\n")
    assert parsed.values == table
    assert parsed.issues == []


# ---------------------------------------------------------------------------------------------------
# Inside a container: a non-root cgroup, where misc.capacity never exists
# ---------------------------------------------------------------------------------------------------


def _container_cgroup(root, self_cgroup):
    from pathlib import Path

    from teesim.kernel.cli import build_pod_view

    build_pod_view(Path(root), self_cgroup.strip()[3:])


def test_a_private_cgroup_namespace_says_why_there_is_no_capacity(tmp_path):
    from ansible_collections.confidential.tee.plugins.module_utils.host.capacity_facts import capacity_facts

    _container_cgroup(tmp_path, "0::/\n")
    facts = capacity_facts(HostReader(str(tmp_path)))
    controller = facts["misc_controller"]
    assert controller["present"] is False and controller["not_root_cgroup"] is True
    assert "not the host's root cgroup, and misc.capacity exists only there" in controller["reason"]
    assert "own cgroup namespace (/proc/self/cgroup is '0::/')" in controller["reason"]
    assert "host_root: /host" in controller["reason"] and "/proc/1/root" in controller["reason"]


def test_a_bind_mounted_container_cgroup_names_its_path(tmp_path):
    from ansible_collections.confidential.tee.plugins.module_utils.host.capacity_check import evaluate

    _container_cgroup(tmp_path, "0::/kubepods.slice/kubepods-pod1.slice/cri-containerd-abc.scope\n")
    state = mc.read_misc_state(HostReader(str(tmp_path)))
    assert "this process's cgroup /kubepods.slice/kubepods-pod1.slice/cri-containerd-abc.scope" in state.layout.reason
    (failure,) = evaluate(state, "tdx").failures
    assert "CONFIG_CGROUP_MISC" not in failure.message  # the kernel is fine; the reader looks at the wrong cgroup


def test_a_kernel_without_misc_is_still_told_apart(tmp_path):
    cg = tmp_path / "sys/fs/cgroup"
    cg.mkdir(parents=True)
    (cg / "cgroup.controllers").write_text("cpu memory pids\n")
    layout = mc.locate_misc(HostReader(str(tmp_path)))
    assert layout.not_root is False and "CONFIG_CGROUP_MISC" in layout.reason


def test_the_preflight_in_a_container_says_where_the_capacity_is(tmp_path):
    from ansible_collections.confidential.tee.plugins.module_utils.host.capacity_facts import capacity_facts
    from ansible_collections.confidential.tee.plugins.module_utils.host.hardware_keys import kernel_counts_tdx

    _container_cgroup(tmp_path, "0::/\n")
    counts, why = kernel_counts_tdx(
        {"version": [6, 18, 0], "release": "6.18.0"}, capacity_facts(HostReader(str(tmp_path)))
    )
    assert counts is None and "not the host's root cgroup" in why and not why.startswith("no misc cgroup controller")
