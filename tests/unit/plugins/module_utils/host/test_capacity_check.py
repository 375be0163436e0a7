"""capacity_check.evaluate: rules and messages without Ansible."""

from __future__ import annotations

from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import HostReader
from ansible_collections.confidential.tee.plugins.module_utils.host.capacity_check import evaluate
from ansible_collections.confidential.tee.plugins.module_utils.host.misc_cgroup import read_misc_state

CG = "/sys/fs/cgroup"


def test_unreadable_capacity_fails_with_the_parse_problem(fs):
    fs.create_file(f"{CG}/misc.capacity", contents="tdx 63\ntdx 64\n")
    report = evaluate(read_misc_state(HostReader("/")), "tdx")
    assert not report.ok
    assert report.failures[0].name == "capacity_readable"
    assert "duplicate line" in report.failures[0].message


def test_unknown_usage_fails_usage_checks_only_when_asked(fs):
    fs.create_file(f"{CG}/misc.capacity", contents="tdx 63\n")
    fs.create_file(f"{CG}/misc.current", contents="tdx lots\n")
    assert evaluate(read_misc_state(HostReader("/")), "tdx").ok
    report = evaluate(read_misc_state(HostReader("/")), "tdx", min_free=1)
    assert [f.name for f in report.failures] == ["usage_readable"]


def test_utilization_and_expected_capacity(fs):
    fs.create_file(f"{CG}/misc.capacity", contents="sev_es 99\n")
    fs.create_file(f"{CG}/misc.current", contents="sev_es 90\n")
    report = evaluate(read_misc_state(HostReader("/")), "sev_es", max_utilization=90.0, expected_capacity=100)
    assert [f.name for f in report.failures] == ["expected_capacity", "max_utilization"]
    assert "90.91%" in report.failures[1].message


def test_min_capacity_above_zero(fs):
    fs.create_file(f"{CG}/misc.capacity", contents="tdx 15\n")
    fs.create_file(f"{CG}/misc.current", contents="tdx 0\n")
    report = evaluate(read_misc_state(HostReader("/")), "tdx", min_capacity=32)
    assert "fewer than required" in report.failures[0].message


def test_min_free_with_unknown_usage_fails_instead_of_raising(fs):
    # Issue 7, defect 3: misc.current a directory, or holding "tdx -1", used to raise a TypeError.
    fs.create_file(f"{CG}/misc.capacity", contents="sev_es 99\ntdx 63\n")
    fs.create_dir(f"{CG}/misc.current")
    report = evaluate(read_misc_state(HostReader("/")), "tdx", min_free=1, max_utilization=50)
    assert [f.name for f in report.failures] == ["usage_readable"]
    assert "is a directory" in report.failures[0].message
    # A resource whose capacity is known to be 0 cannot be charged (the kernel refuses with EINVAL).
    zero = evaluate(read_misc_state(HostReader("/")), "sev", min_capacity=0, min_free=0)
    assert zero.ok and zero.current == 0


def test_negative_usage_is_unknown_usage(fs):
    fs.create_file(f"{CG}/misc.capacity", contents="tdx 63\n")
    fs.create_file(f"{CG}/misc.current", contents="tdx -1\n")
    report = evaluate(read_misc_state(HostReader("/")), "tdx", min_free=1)
    assert [f.name for f in report.failures] == ["usage_readable"] and "negative value" in report.failures[0].message


def test_expected_capacity_zero_never_passes_on_garbage(fs):
    # Issue 7, defect 4: an unreadable capacity used to read as 0, so expected_capacity: 0 passed.
    fs.create_file(f"{CG}/misc.capacity", contents=b"\x00\x01\x02")
    report = evaluate(read_misc_state(HostReader("/")), "tdx", min_capacity=0, expected_capacity=0)
    assert [f.name for f in report.failures] == ["capacity_readable"]
    message = report.failures[0].message
    assert "unknown" in message and "NUL" in message and "BIOS" not in message


def test_clean_file_without_the_resource_line_is_really_zero(fs):
    fs.create_file(f"{CG}/misc.capacity", contents="sev 410\n")
    fs.create_file(f"{CG}/misc.current", contents="sev 0\n")
    report = evaluate(read_misc_state(HostReader("/")), "tdx", min_capacity=0, expected_capacity=0, min_free=0)
    assert report.ok and (report.capacity, report.current, report.free) == (0, 0, 0)


def test_exhaustion_says_how_the_failed_launch_shows_per_technology():
    from ansible_collections.confidential.tee.plugins.module_utils.host.capacity_check import EXHAUSTION_SIGNATURES

    # tdx.c allocates the KeyID before the misc charge: ENOSPC; misc.max: EBUSY. sev.c: EBUSY (QEMU ret=-16).
    assert (
        "KVM_TDX_INIT_VM" in EXHAUSTION_SIGNATURES["tdx"] and "No space left on device" in EXHAUSTION_SIGNATURES["tdx"]
    )
    assert "EBUSY" in EXHAUSTION_SIGNATURES["tdx"] and "misc.max" in EXHAUSTION_SIGNATURES["tdx"]
    for name in ("sev", "sev_es"):
        assert "ret=-16" in EXHAUSTION_SIGNATURES[name] and "ENOSPC" not in EXHAUSTION_SIGNATURES[name]
    assert "ENOTTY" in EXHAUSTION_SIGNATURES["sev_es"]


def test_too_few_free_keys_names_the_real_launch_error(fs):
    fs.create_file(f"{CG}/misc.capacity", contents="sev_es 99\ntdx 63\n")
    fs.create_file(f"{CG}/misc.current", contents="sev_es 98\ntdx 63\n")
    (tdx,) = evaluate(read_misc_state(HostReader("/")), "tdx", min_free=1).failures
    assert "KVM_TDX_INIT_VM failed: No space left on device" in tdx.message
    (snp,) = evaluate(read_misc_state(HostReader("/")), "snp", min_free=2).failures
    assert "ret=-16" in snp.message and "ENOSPC" not in snp.message
