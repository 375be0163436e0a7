"""tee_host_info over a real H100 host capture (CC capable, CC off, no misc controller).

The node tree is built from the capture's cpuinfo flags, kernel release and cgroup controllers, and
`nvidia-smi` is a stand-in that replays the verbatim outputs captured on that host.
"""

from __future__ import annotations

import re
import stat
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

STAND_IN = """#!{python}
import re, sys
from pathlib import Path
capture = Path({capture!r})
args = sys.argv[1:]
if args == ["-q"]:
    sys.stdout.write((capture / "nvidia-smi-q.txt").read_text())
elif args == ["--version"]:
    sys.stdout.write((capture / "nvidia-smi-version.txt").read_text())
elif args[:1] == ["conf-compute"] and len(args) == 2:
    text = (capture / "nvidia-smi-conf-compute.txt").read_text()
    sections = dict(re.findall(r"^## (\\S+)\\n(.*?)(?=^## |\\Z)", text, re.M | re.S))
    if args[1] not in sections:
        sys.exit("stand-in: no capture for " + " ".join(args))
    sys.stdout.write(sections[args[1]])
else:
    sys.exit("stand-in: no capture for " + " ".join(args))
"""


def probe_sections(capture: Path) -> dict[str, str]:
    text = (capture / "host-probe.txt").read_text()
    return dict(re.findall(r"^## (.+?)\n(.*?)(?=^## |\Z)", text, re.M | re.S))


@pytest.fixture
def h100_node(reference: Path, tmp_path: Path) -> tuple[Path, Path]:
    capture = reference / "hosts" / "h100-cc-off"
    probe = probe_sections(capture)
    root = tmp_path / "h100"
    (root / "proc/sys/kernel").mkdir(parents=True)
    (root / "proc/cpuinfo").write_text(
        "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Processor\n"
        + probe["cpuinfo flags"].strip()
        + "\n\n"
    )
    (root / "proc/sys/kernel/osrelease").write_text(probe["uname"].split()[2] + "\n")
    (root / "proc/cmdline").write_text("BOOT_IMAGE=/boot/vmlinuz root=/dev/vda1 ro console=ttyS0\n")
    (root / "sys/fs/cgroup").mkdir(parents=True)
    (root / "sys/fs/cgroup/cgroup.controllers").write_text(probe["cgroup.controllers"])
    (root / "sys/kernel/iommu_groups").mkdir(parents=True)
    (root / "dev").mkdir()
    for device in probe["/dev"].split():
        if device in ("vsock", "kvm", "nvidia0"):
            (root / "dev" / device).write_text("")
    smi = tmp_path / "nvidia-smi"
    smi.write_text(STAND_IN.format(python=sys.executable, capture=str(capture)))
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    return root, smi


def test_h100_capture(h100_node, tmp_path, playbook):
    root, smi = h100_node
    tasks = [
        {"name": "host", "confidential.tee.tee_host_info": {"host_root": str(root), "nvidia_smi_path": str(smi)}},
        {"name": "capacity", "confidential.tee.tee_capacity_info": {"host_root": str(root)}},
    ]
    run = playbook(tmp_path, tasks, {"h100": {}})
    assert run.returncode == 0, run.stderr
    host = run.result("host", "h100")["host"]
    assert host["kernel"]["version"][:2] == [6, 18]
    assert host["cpu"]["flags"]["hypervisor"] is True and host["cpu"]["flags"]["tdx_host_platform"] is False
    assert host["tdx"]["supported"] is False and host["snp"]["supported"] is False
    assert host["vsock"]["vsock"] is True and host["vsock"]["vhost_vsock"] is False
    gpu = host["gpu"]
    assert gpu["present"] and gpu["driver_version"] == "580.159.04"
    assert gpu["cc_capable"] is True and gpu["cc_enabled"] is False and gpu["cc_state"] == "OFF"
    assert gpu["ready_state"] == "not-ready" and gpu["ready"] is False
    assert len(gpu["gpus"]) == 1 and "H100" in gpu["gpus"][0]["name"]
    capacity = run.result("capacity", "h100")
    assert capacity["misc_controller"]["present"] is False
    assert "cpuset cpu io memory hugetlb pids" in capacity["misc_controller"]["reason"]
