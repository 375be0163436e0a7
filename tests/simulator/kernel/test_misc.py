"""MiscController against the kernel's misc.c semantics and seq_printf output."""

from __future__ import annotations

import errno

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from teesim._collection import U64_MAX, parse_misc_text
from teesim.kernel.misc import ChargeError, MiscController
from teesim.kernel.profiles import CURRENT, NO_MISC, OLD

KATA = "kubepods.slice/pod-a"
VMS = "machine.slice/vm-1"


def test_charge_and_render_current_profile_byte_exact() -> None:
    misc = MiscController({"tdx": 63}, CURRENT)
    misc.ensure_cgroup(KATA)
    misc.ensure_cgroup(VMS)
    misc.try_charge(KATA, "tdx", 2)
    misc.try_charge(VMS, "tdx")
    misc.uncharge(KATA, "tdx")
    assert misc.render() == {
        "misc.capacity": "tdx 63\n",
        "misc.current": "tdx 2\n",
        "misc.peak": "tdx 3\n",
        "kubepods.slice/misc.max": "tdx max\n",
        "kubepods.slice/misc.current": "tdx 1\n",
        "kubepods.slice/misc.peak": "tdx 2\n",
        "kubepods.slice/misc.events": "tdx.max 0\n",
        "kubepods.slice/misc.events.local": "tdx.max 0\n",
        "kubepods.slice/pod-a/misc.max": "tdx max\n",
        "kubepods.slice/pod-a/misc.current": "tdx 1\n",
        "kubepods.slice/pod-a/misc.peak": "tdx 2\n",
        "kubepods.slice/pod-a/misc.events": "tdx.max 0\n",
        "kubepods.slice/pod-a/misc.events.local": "tdx.max 0\n",
        "machine.slice/misc.max": "tdx max\n",
        "machine.slice/misc.current": "tdx 1\n",
        "machine.slice/misc.peak": "tdx 1\n",
        "machine.slice/misc.events": "tdx.max 0\n",
        "machine.slice/misc.events.local": "tdx.max 0\n",
        "machine.slice/vm-1/misc.max": "tdx max\n",
        "machine.slice/vm-1/misc.current": "tdx 1\n",
        "machine.slice/vm-1/misc.peak": "tdx 1\n",
        "machine.slice/vm-1/misc.events": "tdx.max 0\n",
        "machine.slice/vm-1/misc.events.local": "tdx.max 0\n",
    }


def test_old_profile_has_no_root_current_no_peak_no_events_local() -> None:
    misc = MiscController({"sev": 410, "sev_es": 99}, OLD)
    misc.ensure_cgroup("machine.slice")
    misc.try_charge("machine.slice", "snp", 3)
    misc.set_max("machine.slice", "sev", 7)
    assert misc.render() == {
        "misc.capacity": "sev 410\nsev_es 99\n",
        "machine.slice/misc.max": "sev 7\nsev_es max\n",
        "machine.slice/misc.current": "sev 0\nsev_es 3\n",
        "machine.slice/misc.events": "sev.max 0\nsev_es.max 0\n",
    }


def test_no_misc_profile_has_no_controller() -> None:
    with pytest.raises(ValueError, match="no misc controller"):
        MiscController({"tdx": 1}, NO_MISC)


def test_zero_capacity_resources_are_omitted_and_capacity_file_may_be_empty() -> None:
    misc = MiscController({"tdx": 0}, CURRENT)
    misc.ensure_cgroup("a")
    files = misc.render()
    assert files["misc.capacity"] == ""
    assert files["misc.current"] == ""
    assert files["a/misc.max"] == ""
    assert files["a/misc.events"] == ""


def test_zero_capacity_charge_is_einval_without_event() -> None:
    misc = MiscController({"sev": 10}, CURRENT)
    misc.ensure_cgroup("a")
    with pytest.raises(ChargeError) as caught:
        misc.try_charge("a", "tdx")
    assert caught.value.errno == errno.EINVAL
    assert misc.events("tdx", "a") == 0


def test_ebusy_at_capacity_counts_the_event_at_the_level_that_failed() -> None:
    misc = MiscController({"tdx": 3}, CURRENT)
    misc.ensure_cgroup(KATA)
    misc.ensure_cgroup(VMS)
    misc.try_charge(VMS, "tdx", 2)
    misc.try_charge(KATA, "tdx", 1)
    with pytest.raises(ChargeError) as caught:
        misc.try_charge(KATA, "tdx")
    err = caught.value
    assert isinstance(err, OSError)
    assert err.errno == errno.EBUSY
    # Only the root's usage (4) exceeds capacity: the root has no events files, so no child counts it.
    assert err.failed_at == ""
    for path in (KATA, "kubepods.slice", VMS, "machine.slice"):
        assert misc.events("tdx", path) == 0
        assert misc.events("tdx", path, local=True) == 0
    assert misc.usage("tdx") == 3
    assert misc.usage("tdx", KATA) == 1
    assert misc.usage("tdx", "kubepods.slice") == 1


def test_ebusy_at_capacity_inside_one_subtree_is_counted_there() -> None:
    misc = MiscController({"tdx": 2}, CURRENT)
    misc.ensure_cgroup(VMS)
    misc.try_charge(VMS, "tdx", 2)
    with pytest.raises(ChargeError) as caught:
        misc.try_charge(VMS, "tdx")
    assert caught.value.failed_at == VMS
    assert misc.events("tdx", VMS) == 1
    assert misc.events("tdx", VMS, local=True) == 1
    assert misc.events("tdx", "machine.slice") == 1
    assert misc.events("tdx", "machine.slice", local=True) == 0
    files = misc.render()
    assert files["machine.slice/vm-1/misc.events"] == "tdx.max 1\n"
    assert files["machine.slice/vm-1/misc.events.local"] == "tdx.max 1\n"
    assert files["machine.slice/misc.events"] == "tdx.max 1\n"
    assert files["machine.slice/misc.events.local"] == "tdx.max 0\n"


def test_ebusy_at_a_parents_misc_max_rolls_back_and_counts_up_the_tree() -> None:
    misc = MiscController({"tdx": 63}, CURRENT)
    leaf = "kubepods.slice/burstable/pod-b"
    misc.ensure_cgroup(leaf)
    misc.set_max("kubepods.slice/burstable", "tdx", 2)
    misc.try_charge(leaf, "tdx", 2)
    with pytest.raises(ChargeError) as caught:
        misc.try_charge(leaf, "tdx")
    assert caught.value.failed_at == "kubepods.slice/burstable"
    # events.local only where the limit was hit; events there and on every ancestor below the root.
    assert misc.events("tdx", "kubepods.slice/burstable", local=True) == 1
    assert misc.events("tdx", "kubepods.slice/burstable") == 1
    assert misc.events("tdx", "kubepods.slice") == 1
    assert misc.events("tdx", "kubepods.slice", local=True) == 0
    assert misc.events("tdx", leaf) == 0
    assert misc.events("tdx", leaf, local=True) == 0
    assert [misc.usage("tdx", p) for p in (leaf, "kubepods.slice/burstable", "kubepods.slice", "")] == [
        2,
        2,
        2,
        2,
    ]
    # The leaf was charged to 3 before its parent refused: its watermark keeps that, as in the kernel.
    assert misc.peak("tdx", leaf) == 3
    assert misc.peak("tdx", "kubepods.slice/burstable") == 2
    assert misc.render()[f"{leaf}/misc.peak"] == "tdx 3\n"


def test_a_childs_own_max_fails_before_touching_ancestors() -> None:
    misc = MiscController({"tdx": 63}, CURRENT)
    misc.ensure_cgroup("a/b")
    misc.set_max("a/b", "tdx", 0)
    with pytest.raises(ChargeError) as caught:
        misc.try_charge("a/b", "tdx")
    assert caught.value.failed_at == "a/b"
    assert misc.events("tdx", "a/b", local=True) == 1
    assert misc.events("tdx", "a") == 1
    assert misc.peak("tdx", "a") == 0
    assert misc.render()["a/b/misc.max"] == "tdx 0\n"


def test_zero_amount_is_a_no_op_and_negative_uncharge_is_refused() -> None:
    misc = MiscController({"tdx": 1}, CURRENT)
    misc.try_charge("", "tdx", 0)
    assert misc.usage("tdx") == 0
    with pytest.raises(ValueError, match="negative"):
        misc.uncharge("", "tdx")


def test_set_max_errors() -> None:
    misc = MiscController({"tdx": 4}, CURRENT)
    misc.ensure_cgroup("a")
    with pytest.raises(OSError) as caught:
        misc.set_max("", "tdx", 1)
    assert caught.value.errno == errno.ENOENT
    with pytest.raises(OSError) as caught:
        misc.set_max("a", "sev", 1)
    assert caught.value.errno == errno.EINVAL
    with pytest.raises(OSError) as caught:
        misc.set_max("a", "tdx", U64_MAX + 1)
    assert caught.value.errno == errno.ERANGE
    misc.set_max("a", "tdx", None)
    assert misc.max("tdx", "a") == U64_MAX


def test_remove_cgroup_refused_while_charged() -> None:
    misc = MiscController({"tdx": 4}, CURRENT)
    misc.ensure_cgroup("a/b")
    misc.try_charge("a/b", "tdx")
    with pytest.raises(OSError):
        misc.remove_cgroup("a/b")
    misc.uncharge("a/b", "tdx")
    misc.remove_cgroup("a/b")
    assert misc.cgroups() == ["", "a"]
    assert "a/b/misc.current" not in misc.render()


def test_unknown_resource_and_cgroup_are_clear_errors() -> None:
    misc = MiscController({"tdx": 4}, CURRENT)
    with pytest.raises(ValueError, match="unknown misc resource 'keys'"):
        misc.try_charge("", "keys")
    with pytest.raises(OSError, match="no cgroup /nope"):
        misc.try_charge("nope", "tdx")


@settings(max_examples=60, deadline=None)
@given(
    ops=st.lists(st.tuples(st.sampled_from(["a", "a/x", "b", "b/y"]), st.booleans(), st.integers(1, 3)), max_size=40),
    limit=st.integers(0, 6),
)
def test_invariants_hold_for_any_sequence(ops: list[tuple[str, bool, int]], limit: int) -> None:
    misc = MiscController({"sev_es": 5}, CURRENT)
    for path in ("a/x", "b/y"):
        misc.ensure_cgroup(path)
    misc.set_max("a", "sev_es", limit)
    failures = 0
    for path, charge, amount in ops:
        if charge:
            try:
                misc.try_charge(path, "sev_es", amount)
            except ChargeError:
                failures += 1
        elif misc.usage("sev_es", path) >= amount and all(
            misc.usage("sev_es", p) >= amount for p in ("", path.split("/")[0], path)
        ):
            misc.uncharge(path, "sev_es", amount)
        assert 0 <= misc.usage("sev_es") <= 5
        assert misc.usage("sev_es", "a") <= limit
        assert misc.usage("sev_es") == misc.usage("sev_es", "a") + misc.usage("sev_es", "b")
        assert misc.peak("sev_es") >= misc.usage("sev_es")
    locals_total = sum(misc.events("sev_es", p, local=True) for p in misc.cgroups())
    root_failures = failures - locals_total
    assert root_failures >= 0
    # Parsing what we render with the collection's parser gives back the numbers.
    parsed = parse_misc_text(misc.render()["misc.current"], signed=True)
    assert parsed.values == {"sev_es": misc.usage("sev_es")}


def _current_texts(misc: MiscController) -> dict[str, str | None]:
    """Every misc.current a usage reader reads: the root's and each top-level cgroup's."""
    top = [c for c in misc.cgroups() if c and "/" not in c]
    return {c: misc.render(c).get(f"{c}/misc.current" if c else "misc.current") for c in ["", *top]}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["mk", "charge", "uncharge", "rm", "max"]), st.integers(0, 5)), max_size=40))
def test_current_revision_moves_whenever_a_current_file_does(ops) -> None:
    """Readers of misc.current skip parsing while ``current_revision`` stands still: it must move with
    every change of those files, and a refused charge (events, not usage) must leave it alone."""
    misc = MiscController({"tdx": 3})
    paths = ["kubepods", "kubepods/pod-a", "kubepods/pod-b", "machine.slice", "machine.slice/vm", "extra"]
    for op, i in ops:
        path = paths[i]
        before, texts = misc.current_revision, _current_texts(misc)
        refused = False
        try:
            if op == "mk":
                misc.ensure_cgroup(path)
            elif op == "charge":
                misc.ensure_cgroup(path)
                before, texts = misc.current_revision, _current_texts(misc)
                misc.try_charge(path, "tdx")
            elif op == "uncharge":
                misc.uncharge(path, "tdx")
            elif op == "rm":
                misc.remove_cgroup(path)
            else:
                misc.set_max(path, "tdx", i % 3)
        except ChargeError:
            refused = True
        except (OSError, ValueError):
            pass
        if misc.current_revision == before:
            assert _current_texts(misc) == texts, (op, path)
        if refused:
            assert misc.current_revision == before, "a refused charge changes no misc.current"
