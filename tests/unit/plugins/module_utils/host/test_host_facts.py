"""host_facts: host trees on pyfakefs, the real H100 capture, synthetic nvidia-smi output, fuzzing."""

from __future__ import annotations

import os
import re
import signal
import stat
import tempfile
from pathlib import Path

import pytest
from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import HostReader
from ansible_collections.confidential.tee.plugins.module_utils.host import gpu_facts as gf
from ansible_collections.confidential.tee.plugins.module_utils.host import host_facts as hf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyfakefs.helpers import set_uid
from teesim.fixtures.capture import BUNDLED_CAPTURES

# The real H100 capture that ships with teesim (simulator/teesim/fixtures/captures).
H100_DIR = BUNDLED_CAPTURES / "h100-cc-off"

TDX_CMDLINE = "BOOT_IMAGE=/vmlinuz-6.16.0 root=UUID=abc nohibernate kvm_intel.tdx=1 intel_iommu=on iommu=pt"
SNP_CMDLINE = "BOOT_IMAGE=/vmlinuz-6.11.0 root=/dev/sda1 ro mem_encrypt=on kvm_amd.sev=1"


def cpuinfo(vendor, flags, processors=2):
    blocks = []
    for number in range(processors):
        blocks.append(
            f"processor\t: {number}\nvendor_id\t: {vendor}\nmodel name\t: Test CPU\n"
            f"flags\t\t: fpu vme {' '.join(flags)}\n"
        )
    return "\n".join(blocks)


def build_host(
    root,
    *,
    vendor="GenuineIntel",
    flags=(),
    cmdline="ro quiet",
    kvm_intel=None,
    kvm_amd=None,
    devices=(),
    iommu_groups=0,
    qgs=False,
    osrelease="6.16.0-tdx",
):
    """A host tree shaped like the real /proc, /sys, /dev and /var of a node (test helper only).

    ``kvm_intel``/``kvm_amd`` map parameter names to the file content; ``None`` means module not loaded.
    """
    root = Path(root)

    def write(rel, text):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    write("proc/cpuinfo", cpuinfo(vendor, flags))
    write("proc/cmdline", cmdline + "\n")
    if osrelease is not None:
        write("proc/sys/kernel/osrelease", osrelease + "\n")
    write("proc/version", f"Linux version {osrelease or '6.1.0'} (builder@host) (gcc 12) #1 SMP\n")
    for module, params in (("kvm_intel", kvm_intel), ("kvm_amd", kvm_amd)):
        if params is not None:
            (root / "sys/module" / module / "parameters").mkdir(parents=True, exist_ok=True)
            for name, value in params.items():
                write(f"sys/module/{module}/parameters/{name}", value)
    for device in devices:
        write("dev/" + device, "")
    (root / "sys/kernel/iommu_groups").mkdir(parents=True, exist_ok=True)
    for group in range(iommu_groups):
        (root / "sys/kernel/iommu_groups" / str(group) / "devices").mkdir(parents=True)
    if qgs:
        (root / "var/run/tdx-qgs").mkdir(parents=True, exist_ok=True)
    return root


def tdx_host(root, **overrides):
    spec = dict(
        flags=("tdx_host_platform", "sgx", "sgx_lc"),
        cmdline=TDX_CMDLINE,
        kvm_intel={"tdx": "Y\n"},
        devices=("sgx_enclave", "sgx_provision", "vhost-vsock", "vsock"),
        iommu_groups=3,
        qgs=True,
    )
    spec.update(overrides)
    return build_host(root, **spec)


def snp_host(root, **overrides):
    spec = dict(
        vendor="AuthenticAMD",
        flags=("sev", "sev_es", "sev_snp"),
        cmdline=SNP_CMDLINE,
        kvm_amd={"sev": "Y\n", "sev_es": "Y\n", "sev_snp": "Y\n"},
        devices=("sev", "vhost-vsock"),
        iommu_groups=5,
        osrelease="6.11.0-snp-host",
    )
    spec.update(overrides)
    return build_host(root, **spec)


def make_qgs_socket(fs, root):
    fs.create_file(os.path.join(root, "var/run/tdx-qgs/qgs.socket"), st_mode=stat.S_IFSOCK | 0o660)


# ------------------------------------------------------------------------------------------------
# Whole hosts on pyfakefs
# ------------------------------------------------------------------------------------------------


def test_tdx_host_is_ready(fs):
    tdx_host("/host")
    make_qgs_socket(fs, "/host")
    facts = hf.gather_host_facts(HostReader("/host"))
    assert facts["tdx"] == {
        "supported": True,
        "enabled": True,
        "cmdline_ready": True,
        "attestation_ready": True,
        "ready": True,
        "reasons": [],
        "advice": [],
    }
    assert facts["kernel"] == {
        "release": "6.16.0-tdx",
        "version": [6, 16, 0],
        "source": "/host/proc/sys/kernel/osrelease",
    }
    assert facts["cmdline"]["args"] == ["nohibernate", "kvm_intel.tdx=1", "intel_iommu=on", "iommu=pt"]
    assert facts["tee_vendor"] == "intel" and facts["boot"]["ok"] is True
    assert "root" not in str(facts["cmdline"])  # the rest of the command line is not reported
    assert facts["iommu"]["groups"] == 3 and facts["iommu"]["enabled"] is True
    assert facts["iommu"]["cmdline_intel_iommu_on"] and facts["iommu"]["cmdline_iommu_pt"]
    assert facts["vsock"] == {"vhost_vsock": True, "vsock": True}
    assert facts["qgs"] == {"path": "/var/run/tdx-qgs/qgs.socket", "present": True, "is_socket": True}
    assert facts["sgx"]["ready"] is True
    assert facts["kvm"]["amd"] == {
        "loaded": False,
        "sev": None,
        "sev_es": None,
        "sev_snp": None,
        "ciphertext_hiding": {
            "path": "/host/sys/module/kvm_amd/parameters/ciphertext_hiding_asids",
            "present": None,
            "asids": None,
            "problem": None,
        },
    }
    assert facts["sev_asids"]["ciphertext_hiding"] is None
    assert facts["sev_asids"]["reasons"] == ["kvm_amd is not loaded"]
    assert facts["sev"]["ready"] is False
    assert facts["sev"]["reasons"] == ["SEV needs an AMD EPYC host; this CPU's vendor is GenuineIntel"]
    assert facts["gpu"]["probed"] is False
    assert facts["warnings"] == []


def test_tdx_qgs_path_that_is_not_a_socket_is_advice(fs):
    tdx_host("/host")
    fs.create_file("/host/var/run/tdx-qgs/qgs.socket")
    facts = hf.gather_host_facts(HostReader("/host"))
    assert facts["qgs"] == {"path": "/var/run/tdx-qgs/qgs.socket", "present": True, "is_socket": False}
    assert facts["tdx"]["ready"] is True and facts["tdx"]["attestation_ready"] is False
    assert "qgsd" in facts["tdx"]["advice"][0]


def test_tdx_param_off_says_how_to_enable(fs):
    tdx_host("/host", kvm_intel={"tdx": "N\n"}, cmdline="ro nohibernate")
    tdx = hf.gather_host_facts(HostReader("/host"))["tdx"]
    assert (tdx["supported"], tdx["enabled"]) == (True, False)
    assert (tdx["cmdline_ready"], tdx["ready"]) == (False, False)
    assert len(tdx["reasons"]) == 1
    assert "add kvm_intel.tdx=1" in tdx["reasons"][0] and "modprobe.d" in tdx["reasons"][0]


def test_tdx_param_off_despite_cmdline_points_at_dmesg(fs):
    tdx_host("/host", kvm_intel={"tdx": "N\n"})
    tdx = hf.gather_host_facts(HostReader("/host"))["tdx"]
    assert tdx["cmdline_ready"] is True and tdx["ready"] is False
    assert "dmesg | grep -i tdx" in tdx["reasons"][0]


def test_tdx_flag_missing_without_nohibernate_names_nohibernate(fs):
    tdx_host("/host", flags=("sgx",), kvm_intel={"tdx": "N\n"}, cmdline="ro kvm_intel.tdx=1")
    tdx = hf.gather_host_facts(HostReader("/host"))["tdx"]
    assert tdx["supported"] is False
    assert "add nohibernate" in tdx["reasons"][0]
    assert "BIOS" in tdx["reasons"][0]


def test_tdx_enabled_but_not_on_cmdline_is_advice_only(fs):
    tdx_host("/host", cmdline="ro kvm-intel.tdx=y")  # dashes and "y" are what the kernel accepts too
    tdx = hf.gather_host_facts(HostReader("/host"))["tdx"]
    assert tdx["ready"] is True and tdx["reasons"] == []
    assert tdx["cmdline_ready"] is False
    assert tdx["advice"][0].startswith("TDX works now but nohibernate is not on the kernel command line")


def test_tdx_old_kernel_without_param_names_the_kernel(fs):
    tdx_host("/host", kvm_intel={"nested": "Y\n"}, osrelease="6.8.0-48-generic")
    tdx = hf.gather_host_facts(HostReader("/host"))["tdx"]
    assert tdx["enabled"] is False
    assert "kernel 6.8.0-48-generic predates upstream KVM TDX in 6.16" in tdx["reasons"][0]


def test_tdx_kvm_intel_not_loaded(fs):
    tdx_host("/host", kvm_intel=None)
    tdx = hf.gather_host_facts(HostReader("/host"))["tdx"]
    assert tdx["reasons"] == [
        "kvm_intel is not loaded (no /sys/module/kvm_intel): load it with `modprobe kvm_intel tdx=1`"
    ]


def test_snp_host_is_ready_for_all_three(fs):
    snp_host("/host")
    facts = hf.gather_host_facts(HostReader("/host"))
    for name in ("sev", "sev_es", "snp"):
        assert facts[name] == {
            "supported": True,
            "enabled": True,
            "cmdline_ready": True,
            "device": True,
            "ready": True,
            "reasons": [],
        }, name
    assert facts["cmdline"]["mem_encrypt"] is True and facts["cmdline"]["kvm_amd_sev"] is True
    assert facts["tdx"]["reasons"] == ["TDX needs an Intel Xeon host; this CPU's vendor is AuthenticAMD"]
    assert facts["vsock"] == {"vhost_vsock": True, "vsock": False}
    assert facts["warnings"] == []


def test_snp_old_int_parameters_accept_1_and_0(fs):
    snp_host("/host", kvm_amd={"sev": "1\n", "sev_es": "1\n", "sev_snp": "0\n"})
    facts = hf.gather_host_facts(HostReader("/host"))
    amd = dict(facts["kvm"]["amd"])
    assert amd.pop("ciphertext_hiding")["present"] is False  # an old kernel: no such parameter, no split
    assert amd == {"loaded": True, "sev": True, "sev_es": True, "sev_snp": False}
    assert facts["sev_asids"]["ciphertext_hiding"] is False and facts["sev_asids"]["snp"]["capacity"] == 0
    assert facts["sev_es"]["ready"] is True
    assert facts["snp"]["ready"] is False
    assert "dmesg | grep -i sev" in facts["snp"]["reasons"][0]


def test_snp_disabled_on_cmdline_and_iommu_off(fs):
    snp_host("/host", kvm_amd={"sev": "Y", "sev_es": "Y", "sev_snp": "N"}, cmdline="ro kvm_amd.sev_snp=0 iommu=off")
    snp = hf.gather_host_facts(HostReader("/host"))["snp"]
    assert snp["cmdline_ready"] is False and snp["ready"] is False
    assert "kvm_amd.sev_snp is disabled on the kernel command line" in snp["reasons"][0]
    assert any("iommu=off" in reason and "SEV-SNP requires it" in reason for reason in snp["reasons"])


def test_snp_without_dev_sev(fs):
    snp_host("/host", devices=())
    facts = hf.gather_host_facts(HostReader("/host"))
    assert facts["devices"]["sev"] is False
    for name in ("sev", "sev_es", "snp"):
        assert facts[name]["ready"] is False
        assert facts[name]["reasons"][0].startswith("/dev/sev is missing: load the ccp driver")


def test_snp_param_missing_on_old_kernel(fs):
    snp_host("/host", kvm_amd={"sev": "Y", "sev_es": "Y"}, osrelease="5.15.0-91-generic")
    snp = hf.gather_host_facts(HostReader("/host"))["snp"]
    assert snp["enabled"] is False
    assert "predates upstream SNP host support in 6.11" in snp["reasons"][0]


def test_sev_es_needs_sev(fs):
    snp_host("/host", kvm_amd={"sev": "N", "sev_es": "Y", "sev_snp": "Y"})
    facts = hf.gather_host_facts(HostReader("/host"))
    assert facts["sev"]["ready"] is False
    assert facts["sev_es"]["reasons"] == ["SEV-ES needs SEV itself enabled in kvm_amd (sev parameter is not Y)"]


def test_plain_host_is_all_false_without_warnings(fs):
    build_host("/host")
    facts = hf.gather_host_facts(HostReader("/host"))
    assert facts["warnings"] == []
    assert facts["cpu"]["flags"]["tdx_host_platform"] is False
    for name in ("tdx", "sev", "sev_es", "snp", "sgx"):
        assert facts[name]["ready"] is False and facts[name]["reasons"], name
    devices = ("sev", "sgx_enclave", "sgx_provision", "vhost_vsock", "vsock")
    assert facts["devices"] == dict.fromkeys(devices, False)
    assert facts["iommu"]["groups"] == 0 and facts["iommu"]["enabled"] is False
    assert facts["qgs"]["present"] is False


def test_virtual_machine_is_told_apart(fs):
    build_host("/host", flags=("hypervisor",), kvm_intel={})
    tdx = hf.gather_host_facts(HostReader("/host"))["tdx"]
    assert "virtual machine" in tdx["reasons"][0]


def test_empty_tree_warns_about_missing_proc_files(fs):
    fs.create_dir("/empty")
    facts = hf.gather_host_facts(HostReader("/empty"))
    warned = {warning["path"] for warning in facts["warnings"]}
    assert warned == {"/empty/proc/cpuinfo", "/empty/proc/cmdline", "/empty/proc/version"}
    assert facts["cpu"]["flags"]["tdx_host_platform"] is None
    assert facts["tdx"]["supported"] is None
    assert facts["tdx"]["reasons"][0].startswith("cannot tell whether the CPU supports TDX")
    assert facts["kernel"] == {"release": None, "version": None, "source": None}


def test_host_root_must_be_a_directory(fs):
    fs.create_file("/not-a-dir")
    with pytest.raises(hf.HostRootError, match="not a directory"):
        hf.gather_host_facts(HostReader("/not-a-dir"))
    with pytest.raises(hf.HostRootError):
        hf.gather_host_facts(HostReader("/does/not/exist"))


def test_unreadable_files_are_facts_with_warnings(fs):
    tdx_host("/host")
    os.remove("/host/proc/cpuinfo")
    fs.create_dir("/host/proc/cpuinfo")  # EISDIR: unreadable, not absent
    os.chmod("/host/sys/module/kvm_intel/parameters/tdx", 0o000)
    os.chmod("/host/sys/kernel/iommu_groups", 0o000)
    os.chmod("/host/proc/sys/kernel/osrelease", 0o000)
    set_uid(1000)
    try:
        facts = hf.gather_host_facts(HostReader("/host"))
    finally:
        set_uid(0)
    problems = {warning["path"]: warning["problem"] for warning in facts["warnings"]}
    assert problems["/host/proc/cpuinfo"] == "is a directory, not a regular file: not opened"
    assert problems["/host/sys/module/kvm_intel/parameters/tdx"].startswith("unreadable: ")
    assert problems["/host/sys/kernel/iommu_groups"].startswith("unreadable directory: ")
    assert problems["/host/proc/sys/kernel/osrelease"].startswith("unreadable: ")
    assert facts["kernel"]["source"] == "/host/proc/version"  # fell back
    assert facts["kernel"]["release"] == "6.16.0-tdx"
    assert facts["cpu"]["readable"] is False and facts["tdx"]["supported"] is None
    assert facts["kvm"]["intel"]["tdx"] is None
    assert facts["iommu"]["groups"] is None and facts["iommu"]["enabled"] is None


def test_garbage_values_become_unknown_with_warnings(fs):
    tdx_host("/host", kvm_intel={"tdx": "maybe\n"}, osrelease="\x00\x01")
    fs.create_file("/host/sys/kernel/iommu_groups/not-a-group")
    Path("/host/proc/cmdline").write_bytes(b"\xff\xfe nohibernate \x00 kvm_intel.tdx=1\n")
    facts = hf.gather_host_facts(HostReader("/host"))
    problems = {warning["path"]: warning["problem"] for warning in facts["warnings"]}
    assert problems["/host/sys/module/kvm_intel/parameters/tdx"] == ("unexpected value 'maybe' (expected Y, N, 1 or 0)")
    assert problems["/host/proc/sys/kernel/osrelease"] == "no kernel release in it"
    assert facts["kvm"]["intel"]["tdx"] is None and facts["tdx"]["enabled"] is False
    assert facts["iommu"]["groups"] == 3
    assert facts["cmdline"]["nohibernate"] is True and facts["cmdline"]["kvm_intel_tdx"] is True


def test_cpuinfo_without_flags_line_warns(fs):
    build_host("/host")
    Path("/host/proc/cpuinfo").write_text("processor\t: 0\nvendor_id\t: GenuineIntel\n")
    facts = hf.gather_host_facts(HostReader("/host"))
    assert facts["cpu"]["flags"]["sgx"] is None
    assert facts["warnings"] == [
        {
            "path": "/host/proc/cpuinfo",
            "problem": "no 'flags' line: CPU features are unknown",
            "line_number": None,
            "line": None,
        }
    ]


# ------------------------------------------------------------------------------------------------
# Parsers
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Y\n", (True, None)),
        ("1\n", (True, None)),
        ("N\n", (False, None)),
        ("0", (False, None)),
        ("", (None, "unexpected value '' (expected Y, N, 1 or 0)")),
        ("2\n", (None, "unexpected value '2' (expected Y, N, 1 or 0)")),
        (b"Y\n", (True, None)),
    ],
)
def test_parse_sysfs_bool(text, expected):
    assert hf.parse_sysfs_bool(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("6.16.0-tdx\n", ("6.16.0-tdx", [6, 16, 0])),
        ("6.8\n", ("6.8", [6, 8, 0])),
        ("weird-release", ("weird-release", None)),
        ("", (None, None)),
        ("\n\n", (None, None)),
    ],
)
def test_parse_kernel_release(text, expected):
    assert hf.parse_kernel_release(text) == expected


def test_parse_proc_version():
    text = "Linux version 6.18.44-fc-v657-gpu (root@build) (gcc (GCC) 13.2.0) #1 SMP PREEMPT_DYNAMIC\n"
    assert hf.parse_proc_version(text) == ("6.18.44-fc-v657-gpu", [6, 18, 44])
    assert hf.parse_proc_version("something else") == (None, None)


def test_parse_cpuinfo_keeps_only_flags_common_to_every_cpu():
    text = cpuinfo("GenuineIntel", ("sgx", "sgx_lc")) + "\nprocessor\t: 2\nflags\t\t: fpu vme sgx\n"
    parsed = hf.parse_cpuinfo(text)
    assert parsed["flags"] == {"fpu", "vme", "sgx"}
    assert parsed["flags_consistent"] is False
    assert parsed["processors"] == 3
    assert parsed["vendor"] == "GenuineIntel" and parsed["model_name"] == "Test CPU"


# ------------------------------------------------------------------------------------------------
# With GPU facts
# ------------------------------------------------------------------------------------------------


H100_HOST_PROBE = (H100_DIR / "host-probe.txt").read_text()  # read before pyfakefs hides the real disk


def test_real_h100_host_probe_is_a_vm_without_host_tee(fs):
    probe = H100_HOST_PROBE
    flags_line = re.search(r"^flags\t\t: .*$", probe, re.M).group(0)
    release = re.search(r"^Linux vm (\S+)", probe, re.M).group(1)
    build_host("/host", osrelease=release)
    Path("/host/proc/cpuinfo").write_text("processor\t: 0\nvendor_id\t: GenuineIntel\n" + flags_line + "\n")
    facts = hf.gather_host_facts(HostReader("/host"))
    assert facts["kernel"]["version"] == [6, 18, 44]
    assert facts["cpu"]["flags"]["hypervisor"] is True
    assert facts["cpu"]["flags"]["tdx_host_platform"] is False and facts["cpu"]["flags"]["sgx"] is False
    assert "virtual machine" in facts["tdx"]["reasons"][0]


def test_gather_host_facts_merges_gpu_warnings(fs):
    build_host("/host")
    gpu = gf.summarize_gpu("nvidia-smi", {"query": (3, "", "boom")})
    facts = hf.gather_host_facts(HostReader("/host"), gpu=gpu)
    assert facts["gpu"]["probed"] is True
    assert facts["warnings"] == [
        {"path": "nvidia-smi -q", "problem": "exit code 3: boom", "line_number": None, "line": None}
    ]


# ------------------------------------------------------------------------------------------------
# Property-based: no input makes a parser raise, and well-formed input gives exact answers
# ------------------------------------------------------------------------------------------------

PARSERS = [
    hf.parse_cpuinfo,
    hf.parse_sysfs_bool,
    hf.parse_kernel_release,
    hf.parse_proc_version,
]

# Pieces of real formats, so that random input reaches the parsers' deeper branches.
FRAGMENTS = (
    "flags\t\t: sgx",
    "processor : 1",
    "GPU 00000000:00:06.0",
    "    Total   : 5 MiB",
    " : ",
    ":",
    "=",
    '"',
    "--",
    "kvm_intel.tdx=",
    "Driver Version : 1",
    "CC State : ON",
    "\t",
    "\n",
    "Y",
    "\x00",
    "\ufffd",
)
structured_text = st.lists(
    st.sampled_from(FRAGMENTS) | st.text(max_size=20),
    max_size=30,
).map("".join)


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=512) | st.text(max_size=512) | structured_text)
def test_no_parser_raises(data):
    for parser in PARSERS:
        parser(data)


@settings(max_examples=200, deadline=None)
@given(value=st.sampled_from(["Y", "N", "1", "0"]), spaces=st.sampled_from(["", "\n", " \n", "\t"]))
def test_sysfs_bool_is_exact(value, spaces):
    assert hf.parse_sysfs_bool(value + spaces) == (value in ("Y", "1"), None)


FILES = [
    "proc/cpuinfo",
    "proc/cmdline",
    "proc/sys/kernel/osrelease",
    "proc/version",
    "sys/module/kvm_intel/parameters/tdx",
    "sys/module/kvm_amd/parameters/sev",
    "sys/module/kvm_amd/parameters/sev_es",
    "sys/module/kvm_amd/parameters/sev_snp",
]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    contents=st.lists(
        st.binary(max_size=200) | structured_text.map(str.encode), min_size=len(FILES), max_size=len(FILES)
    ),
    groups=st.integers(min_value=0, max_value=12),
)
def test_gather_host_facts_never_raises_on_random_files(contents, groups):
    with tempfile.TemporaryDirectory() as root:
        for rel, data in zip(FILES, contents, strict=True):
            path = Path(root, rel)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        for group in range(groups):
            Path(root, "sys/kernel/iommu_groups", str(group)).mkdir(parents=True)
        facts = hf.gather_host_facts(HostReader(root))
    assert facts["iommu"]["groups"] == groups
    for name in ("tdx", "sev", "sev_es", "snp", "sgx"):
        assert isinstance(facts[name]["ready"], bool)
        assert facts[name]["ready"] or facts[name]["reasons"], name
    exact = {"Y": True, "y": True, "1": True, "N": False, "n": False, "0": False}
    for param, data in zip(("sev", "sev_es", "sev_snp"), contents[5:], strict=True):
        expected = exact.get(data.decode("utf-8", "replace").strip())
        assert facts["kvm"]["amd"][param] is expected


# ------------------------------------------------------------------------------------------------
# Hostile trees: special files anywhere the modules read
# ------------------------------------------------------------------------------------------------

HOSTILE_PATHS = [
    "proc/cmdline",
    "proc/cpuinfo",
    "proc/sys/kernel/osrelease",
    "sys/module/kvm_intel/parameters/tdx",
    "sys/power/state",
    "sys/fs/cgroup/misc.capacity",
    "sys/fs/cgroup/misc.current",
    "sys/fs/cgroup/misc.peak",
    "sys/kernel/iommu_groups/0/type",
]
KINDS = ("text", "fifo", "directory", "dangling", "loop", "absent", "device")


def plant(root: Path, rel: str, kind: str, data: bytes) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "text":
        path.write_bytes(data)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "dangling":
        path.symlink_to("/nowhere/at/all")
    elif kind == "loop":
        path.symlink_to(path.name)
    elif kind == "device":
        try:  # a real /dev/zero node: reading it would never end
            os.mknod(path, stat.S_IFCHR | 0o444, os.makedev(1, 5))
        except PermissionError:
            path.symlink_to("/proc/self/fd/0")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kinds=st.lists(st.sampled_from(KINDS), min_size=len(HOSTILE_PATHS), max_size=len(HOSTILE_PATHS)),
    data=st.binary(max_size=64) | st.sampled_from([b"tdx 63\n", b"Y\n", b"ro nohibernate\n", b"tdx -1\n"]),
)
def test_hostile_trees_never_hang_raise_or_invent_numbers(kinds, data):
    from ansible_collections.confidential.tee.plugins.module_utils.host.capacity_facts import capacity_facts

    previous = signal.signal(signal.SIGALRM, _blocked)
    signal.alarm(20)
    try:
        with tempfile.TemporaryDirectory() as root:
            for rel, kind in zip(HOSTILE_PATHS, kinds, strict=True):
                plant(Path(root), rel, kind, data)
            facts = hf.gather_host_facts(HostReader(root))
            capacity = capacity_facts(HostReader(root))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert isinstance(facts["tdx"]["ready"], bool)
    capacity_kind = kinds[HOSTILE_PATHS.index("sys/fs/cgroup/misc.capacity")]
    if capacity_kind != "text" and capacity["misc_controller"]["present"]:
        # Anything but a readable regular file at misc.capacity: every capacity is unknown, never 0.
        assert all(entry["capacity"] is None for entry in capacity["resources"].values()), capacity


def _blocked(_signum, _frame):
    raise AssertionError("a read blocked")
