"""tee_host_info: main() driven with real module arguments; nvidia-smi is a mocked run_command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest
import yaml
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common import warnings as ansible_warnings
from ansible.module_utils.testing import patch_module_args
from ansible_collections.confidential.tee.plugins.doc_fragments import host_root
from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import HostReader
from ansible_collections.confidential.tee.plugins.module_utils.host.capacity_facts import capacity_facts
from ansible_collections.confidential.tee.plugins.module_utils.host.fleet_view import fleet_view
from ansible_collections.confidential.tee.plugins.modules import tee_host_info


def small_tdx_tree(root: Path) -> Path:
    """Just enough of a TDX host for the module; test_host_facts covers the variations."""
    files = {
        "proc/cpuinfo": "processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: fpu tdx_host_platform\n",
        "proc/cmdline": "ro nohibernate kvm_intel.tdx=1\n",
        "proc/sys/kernel/osrelease": "6.16.3\n",
        "sys/module/kvm_intel/parameters/tdx": "Y\n",
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def run_main(capsys, args):
    """``(exit code, result)`` of one real run: exit_json/fail_json print JSON and exit as in production.

    (conftest's ``run_module`` intercepts exit_json instead; this checks the serialised output too.)
    """
    # Module warnings are process-global and would leak from one run into the next.
    with (
        mock.patch.dict(ansible_warnings._global_warnings, clear=True),
        mock.patch.dict(ansible_warnings._global_deprecations, clear=True),
        patch_module_args(args),
        pytest.raises(SystemExit) as exited,
    ):
        tee_host_info.main()
    return exited.value.code, json.loads(capsys.readouterr().out)


def warning_messages(result):
    """Module warnings as text (ansible-core 2.19 returns structured warning summaries)."""
    return [item["event"]["msg"] if isinstance(item, dict) else item for item in result.get("warnings", [])]


FAKE_NVIDIA_SMI = r"""#!/bin/sh
# A stand-in nvidia-smi: answers like the real one, or as FAKE_SMI_MODE says it should fail.
echo "$*" >> "$(dirname "$0")/calls"
case "${FAKE_SMI_MODE:-ok}:$*" in
  hang:conf-compute\ -q) sleep 30 ;;
  broken:-q) echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."; exit 9 ;;
  latin1:-q) printf 'Driver Version : 570.1\n\nAttached GPUs : 1\nGPU 00000000:41:00.0\n    Product Name : Caf\351\n' ;;
  flood:-q) yes "Driver Version : 570.1" ;;
  *:conf-compute\ -q) printf '\n    CC State                   : ON\n    GPU CC Capabilities        : CC Capable\n' ;;
  *:conf-compute\ -f) echo "CC status: ON" ;;
  *:conf-compute\ -grs) echo "Confidential Compute GPUs Ready state: ready" ;;
  *:-q) printf 'Driver Version : 570.1\n\nAttached GPUs : 1\nGPU 00000000:41:00.0\n'
        printf '    Product Name : Synthetic H100\n' ;;
  *) echo "unexpected arguments: $*" >&2; exit 2 ;;
esac
"""


def calls_of(nvidia_smi):
    path = Path(nvidia_smi).parent / "calls"
    return path.read_text().splitlines() if path.exists() else []


@pytest.fixture
def nvidia_smi(tmp_path):
    path = tmp_path / "bin" / "nvidia-smi"
    path.parent.mkdir()
    path.write_text(FAKE_NVIDIA_SMI)
    path.chmod(0o755)
    return str(path)


def test_tdx_tree_without_gpu(capsys, tmp_path):
    root = small_tdx_tree(tmp_path / "node")
    with mock.patch.object(AnsibleModule, "run_command") as run_command:
        code, result = run_main(capsys, {"host_root": str(root), "gather_gpu": False})
    assert code == 0
    run_command.assert_not_called()
    assert result["changed"] is False
    host = result["host"]
    assert host["host_root"] == str(root)
    assert host["tdx"]["ready"] is True and host["tdx"]["cmdline_ready"] is True
    assert host["kernel"]["version"] == [6, 16, 3]
    assert host["gpu"]["probed"] is False
    assert host["gpu"]["reasons"] == ["not gathered: gather_gpu is false"]
    assert result["ansible_facts"]["tee_host"] == host


def test_check_mode_reports_the_same(capsys, tmp_path):
    root = small_tdx_tree(tmp_path / "node")
    normal = run_main(capsys, {"host_root": str(root), "gather_gpu": False})[1]
    code, checked = run_main(capsys, {"host_root": str(root), "gather_gpu": False, "_ansible_check_mode": True})
    assert code == 0 and checked["changed"] is False
    assert checked["host"] == normal["host"]


def test_explicit_nvidia_smi_is_run_for_real(capsys, tmp_path, nvidia_smi):
    root = small_tdx_tree(tmp_path / "node")
    code, result = run_main(capsys, {"host_root": str(root), "nvidia_smi_path": nvidia_smi, "gpu_timeout": 9})
    assert code == 0
    assert calls_of(nvidia_smi) == ["conf-compute -q", "conf-compute -f", "conf-compute -grs", "-q"]
    gpu = result["host"]["gpu"]
    assert gpu["probed"] is True and gpu["nvidia_smi"] == nvidia_smi
    assert gpu["ready"] is True and gpu["cc_enabled"] is True and gpu["ready_state"] == "ready"
    assert gpu["driver_version"] == "570.1"
    assert [entry["name"] for entry in gpu["gpus"]] == ["Synthetic H100"]


def test_nvidia_smi_from_path_only_for_the_real_root(capsys, nvidia_smi):
    def which(self, name, *args, **kwargs):
        return {"nvidia-smi": nvidia_smi}.get(name)

    with mock.patch.object(AnsibleModule, "get_bin_path", which):
        code, result = run_main(capsys, {})
    assert code == 0
    assert calls_of(nvidia_smi)[0] == "conf-compute -q"
    assert result["host"]["host_root"] == "/"
    assert result["host"]["gpu"]["ready"] is True


def test_nvidia_smi_missing_from_path(capsys):
    with mock.patch.object(AnsibleModule, "get_bin_path", return_value=None):
        code, result = run_main(capsys, {})
    assert code == 0
    assert result["host"]["gpu"]["reasons"] == ["nvidia-smi not found on PATH: no NVIDIA driver installed on this host"]


def test_other_host_root_skips_path_lookup(capsys, tmp_path):
    root = small_tdx_tree(tmp_path / "node")
    with (
        mock.patch.object(AnsibleModule, "run_command") as run_command,
        mock.patch.object(AnsibleModule, "get_bin_path", return_value="/usr/bin/nvidia-smi"),
    ):
        code, result = run_main(capsys, {"host_root": str(root)})
    assert code == 0
    run_command.assert_not_called()
    assert "set nvidia_smi_path to run it anyway" in result["host"]["gpu"]["reasons"][0]


def test_bad_nvidia_smi_path_is_a_warning(capsys, tmp_path):
    root = small_tdx_tree(tmp_path / "node")
    missing = str(tmp_path / "nope" / "nvidia-smi")
    code, result = run_main(capsys, {"host_root": str(root), "nvidia_smi_path": missing})
    assert code == 0
    problem = "nvidia_smi_path is not an executable file: fix the path or set gather_gpu: false"
    assert result["host"]["warnings"] == result["host"]["problems"]  # deprecated name, until release 0.3.0
    assert result["host"]["problems"] == [{"path": missing, "problem": problem, "line_number": None, "line": None}]
    assert warning_messages(result) == [f"{missing}: {problem}"]


def test_hanging_and_failing_nvidia_smi_are_warnings(capsys, tmp_path, nvidia_smi, monkeypatch):
    root = small_tdx_tree(tmp_path / "node")
    monkeypatch.setenv("FAKE_SMI_MODE", "hang")
    code, result = run_main(capsys, {"host_root": str(root), "nvidia_smi_path": nvidia_smi, "gpu_timeout": 1})
    assert code == 0
    problems = [warning["problem"] for warning in result["host"]["problems"]]
    assert problems == ["timed out: killed after gpu_timeout seconds without finishing"]
    # -f still answered, so the CC state is known even though -q timed out.
    assert result["host"]["gpu"]["cc_enabled"] is True and result["host"]["gpu"]["ready"] is True
    monkeypatch.setenv("FAKE_SMI_MODE", "broken")
    code, result = run_main(capsys, {"host_root": str(root), "nvidia_smi_path": nvidia_smi})
    failure = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
    assert warning_messages(result) == [f"{nvidia_smi} -q: exit code 9: {failure}"]


def test_nvidia_smi_bytes_that_are_not_utf8_never_fail_the_task(capsys, tmp_path, nvidia_smi, monkeypatch):
    # Issue 7, defect 7: invalid UTF-8 from nvidia-smi used to fail the task.
    root = small_tdx_tree(tmp_path / "node")
    monkeypatch.setenv("FAKE_SMI_MODE", "latin1")
    code, result = run_main(capsys, {"host_root": str(root), "nvidia_smi_path": nvidia_smi})
    assert code == 0
    assert [entry["name"] for entry in result["host"]["gpu"]["gpus"]] == ["Caf\ufffd"]


def test_nvidia_smi_output_is_bounded(capsys, tmp_path, nvidia_smi, monkeypatch):
    root = small_tdx_tree(tmp_path / "node")
    monkeypatch.setenv("FAKE_SMI_MODE", "flood")
    code, result = run_main(capsys, {"host_root": str(root), "nvidia_smi_path": nvidia_smi, "gpu_timeout": 20})
    assert code == 0
    problems = [warning["problem"] for warning in result["host"]["problems"]]
    assert any(problem.startswith("printed more than 4194304 bytes") for problem in problems)


def test_missing_host_root_fails_with_a_fix(capsys, tmp_path):
    code, result = run_main(capsys, {"host_root": str(tmp_path / "absent")})
    assert code == 1 and result["failed"] is True
    assert "is not a directory" in result["msg"] and "/host" in result["msg"]


def test_gpu_timeout_must_be_positive(capsys, tmp_path):
    code, result = run_main(capsys, {"host_root": str(tmp_path), "gpu_timeout": 0})
    assert code == 1
    assert result["msg"].startswith("gpu_timeout must be at least 1 second, got 0")


def test_unknown_option_is_rejected(capsys, tmp_path):
    code, result = run_main(capsys, {"host_root": str(tmp_path), "gpu": True})
    assert code == 1 and "Unsupported parameters" in result["msg"]


def test_documentation_matches_argument_spec():
    doc = yaml.safe_load(tee_host_info.DOCUMENTATION)
    captured = {}

    def fake_init(self, argument_spec, **kwargs):
        captured.update(argument_spec=argument_spec, **kwargs)
        raise SystemExit(0)

    with mock.patch.object(AnsibleModule, "__init__", fake_init), pytest.raises(SystemExit):
        tee_host_info.main()
    spec = captured["argument_spec"]
    assert captured["supports_check_mode"] is True
    fragment = yaml.safe_load(host_root.ModuleDocFragment.DOCUMENTATION)
    assert doc["extends_documentation_fragment"][0] == "confidential.tee.host_root"
    documented = dict(doc["options"], **fragment["options"])
    assert set(spec) == set(documented)
    for name, option in spec.items():
        assert option.get("type") == documented[name]["type"], name
        assert option.get("default") == documented[name].get("default"), name
    yaml.safe_load(tee_host_info.EXAMPLES)


def test_capacity_in_the_same_round_trip(capsys, tmp_path):
    root = small_tdx_tree(tmp_path / "node")
    (root / "sys/fs/cgroup").mkdir(parents=True)
    (root / "sys/fs/cgroup/misc.capacity").write_text("tdx 63\n")
    (root / "sys/fs/cgroup/misc.current").write_text("tdx 2\n")
    code, result = run_main(capsys, {"host_root": str(root), "gather_gpu": False, "capacity": True})
    assert code == 0
    tdx = result["host"]["capacity"]["resources"]["tdx"]
    assert (tdx["capacity"], tdx["current"], tdx["free"]) == (63, 2, 61)
    # Exactly what tee_capacity_info returns with its defaults.
    assert result["host"]["capacity"] == capacity_facts(HostReader(str(root)))
    assert "capacity" not in run_main(capsys, {"host_root": str(root), "gather_gpu": False})[1]["host"]


def test_return_documents_every_key(capsys, tmp_path):
    root = small_tdx_tree(tmp_path / "node")
    # preflight: true returns every key (capacity included).
    result = run_main(capsys, {"host_root": str(root), "gather_gpu": False, "preflight": True})[1]
    returned = yaml.safe_load(tee_host_info.RETURN)["host"]
    assert set(returned["contains"]) == set(result["host"])
    assert set(returned["contains"]["preflight"]["sample"]) <= set(result["host"]["preflight"])
    assert set(returned["contains"]["hardware_keys"]["sample"]) == set(result["host"]["hardware_keys"])
    assert set(returned["contains"]["pci"]["sample"]) == set(result["host"]["pci"])
    assert set(returned["contains"]["gpu"]["sample"]) == set(result["host"]["gpu"])
    assert set(returned["contains"]["tdx"]["sample"]) == set(result["host"]["tdx"])
    assert set(returned["contains"]["sev"]["sample"]) == set(result["host"]["snp"])
    assert set(returned["contains"]["cmdline"]["sample"]) == set(result["host"]["cmdline"])
    assert set(returned["contains"]["iommu"]["sample"]) == set(result["host"]["iommu"])


def test_preflight_in_the_same_round_trip(capsys, tmp_path):
    root = small_tdx_tree(tmp_path / "node")
    (root / "sys/fs/cgroup/machine.slice").mkdir(parents=True)
    (root / "sys/fs/cgroup/misc.capacity").write_text("tdx 63\n")
    (root / "sys/fs/cgroup/misc.current").write_text("tdx 62\n")
    (root / "sys/fs/cgroup/machine.slice/misc.current").write_text("tdx 62\n")
    (root / "sys/fs/cgroup/machine.slice/misc.max").write_text("tdx max\n")
    (root / "sys/fs/cgroup/machine.slice/misc.events").write_text("tdx.max 3\n")
    args = {"host_root": str(root), "gather_gpu": False, "preflight": True, "min_free_keys": 2}
    code, result = run_main(capsys, args)
    assert code == 0
    host = result["host"]
    preflight = host["preflight"]
    keys = next(s for s in preflight["sections"] if s["id"] == "keys")["checks"][0]
    assert keys["status"] == "FAIL" and keys["ok"] is False and keys["fix"]
    assert keys["name"] == "keys.free" and keys["message"] == "tdx: 1 of 63 free (62 in use)"
    # The old names of the check record (until release 0.3.0) say the same.
    checks = [check for section in preflight["sections"] for check in section["checks"]]
    assert checks and all(
        (c["id"], c["verdict"], c["detail"], c["remediation"]) == (c["name"], c["status"], c["message"], c["fix"])
        for c in checks
    )
    assert preflight["ready"] is False and preflight["table"][0].startswith("FAIL  NOT READY for TDX guests")
    assert host["capacity"]["cgroups"][0]["events"] == {"tdx": 3}
    assert "ansible_facts" not in result  # registered instead: the facts twice would double the data


def test_preflight_takes_an_attestation_result(capsys, tmp_path):
    root = small_tdx_tree(tmp_path / "node")
    attestation = {"failed": True, "msg": "quote verification failed: TCB out of date"}
    args = {"host_root": str(root), "gather_gpu": False, "preflight": True, "attestation": attestation}
    section = next(s for s in run_main(capsys, args)[1]["host"]["preflight"]["sections"] if s["id"] == "attestation")
    assert section["verdict"] == "FAIL"
    assert section["checks"][0]["remediation"] == "quote verification failed: TCB out of date"


def test_min_free_keys_must_not_be_negative(capsys, tmp_path):
    root = small_tdx_tree(tmp_path / "node")
    code, result = run_main(capsys, {"host_root": str(root), "preflight": True, "min_free_keys": -1})
    assert code == 1 and "min_free_keys must be 0 or more, got -1" in result["msg"]


def test_fleet_result_is_the_report_view_of_the_full_facts(capsys, tmp_path):
    root = small_tdx_tree(tmp_path / "node")
    (root / "sys/fs/cgroup/machine.slice").mkdir(parents=True)
    (root / "sys/fs/cgroup/misc.capacity").write_text("tdx 63\n")
    (root / "sys/fs/cgroup/misc.current").write_text("tdx 5\n")
    args = {"host_root": str(root), "gather_gpu": False, "preflight": True}
    _, full = run_main(capsys, args)
    code, fleet = run_main(capsys, dict(args, result="fleet"))
    assert code == 0 and fleet["host"] == fleet_view(full["host"]) == fleet_view(fleet["host"])
    assert fleet["host"]["preflight"] == full["host"]["preflight"]
    assert len(json.dumps(fleet["host"])) < 0.8 * len(json.dumps(full["host"]))
    assert "ansible_facts" not in fleet


def test_fleet_result_needs_preflight(capsys, tmp_path):
    root = small_tdx_tree(tmp_path / "node")
    code, result = run_main(capsys, {"host_root": str(root), "gather_gpu": False, "result": "fleet"})
    assert code == 1 and "set preflight: true" in result["msg"]


LAZY_PROBE = """
import json, sys
from ansible.module_utils.testing import patch_module_args
from ansible_collections.confidential.tee.plugins.modules import tee_host_info
args = json.loads(sys.argv[1])
try:
    with patch_module_args(args):
        tee_host_info.main()
except SystemExit:
    pass
prefix = "ansible_collections.confidential.tee.plugins.module_utils."
print(json.dumps(sorted(m[len(prefix):] for m in sys.modules if m.startswith(prefix))), file=sys.stderr)
"""


def _imported_by_a_run(tmp_path, args):
    """The collection's module_utils one run of main() imports, in a fresh interpreter (as on a managed host)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run(
        [sys.executable, "-c", LAZY_PROBE, json.dumps(args)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return set(json.loads(done.stderr.strip().splitlines()[-1]))


def test_a_host_not_probed_never_imports_the_gpu_probe(tmp_path):
    """AnsiballZ compiles every imported module from source on each host: the fleet report's nodes
    (``host_root`` not ``/``, no ``nvidia_smi_path``) must not pay for the nvidia-smi probe and its process runner."""
    root = small_tdx_tree(tmp_path)
    fleet = _imported_by_a_run(tmp_path, {"host_root": str(root), "preflight": True, "result": "fleet"})
    assert "host.gpu_unprobed" in fleet
    assert not {"host.gpu_facts", "common.process"} & fleet
    probed = _imported_by_a_run(tmp_path, {"host_root": str(root), "nvidia_smi_path": "/bin/true"})
    assert {"host.gpu_facts", "common.process"} <= probed
    assert {"host.preflight", "host.hardware_keys", "host.misc_cgroup", "host.fleet_view"} <= fleet


def test_the_plain_call_never_imports_the_preflight_checks_or_the_cgroup_parser(tmp_path):
    """The cluster playbook and tee_node call tee_host_info once per node without preflight or capacity: the host
    must not compile what only those read (preflight, hardware keys, the misc cgroup parser: about 1,600 lines)."""
    root = small_tdx_tree(tmp_path)
    plain = _imported_by_a_run(tmp_path, {"host_root": str(root), "gather_gpu": False})
    assert "host.host_facts" in plain
    assert (
        not {"host.preflight", "host.hardware_keys", "host.capacity_facts", "host.misc_cgroup", "host.fleet_view"}
        & plain
    )
    capacity = _imported_by_a_run(tmp_path, {"host_root": str(root), "gather_gpu": False, "capacity": True})
    assert {"host.capacity_facts", "host.misc_cgroup"} <= capacity and "host.preflight" not in capacity


def test_gather_virtual_sets_the_facts_setup_would_set_in_the_same_call(tmp_path, capsys):
    from ansible.module_utils.facts.virtual.linux import LinuxVirtualCollector

    root = small_tdx_tree(tmp_path)
    code, result = run_main(capsys, {"host_root": str(root), "gather_gpu": False, "gather_virtual": True})

    assert code == 0
    facts = result["ansible_facts"]
    # Ansible's own collector, run here as setup's virtual subset runs it on this machine (not on host_root).
    with patch_module_args({}):
        module = AnsibleModule(argument_spec={})
    expected = LinuxVirtualCollector().collect(module=module)
    expected = {key: sorted(value) if isinstance(value, set) else value for key, value in expected.items()}
    assert {key: facts[key] for key in facts if key != "tee_host"} == expected
    assert {"virtualization_type", "virtualization_role"} <= set(facts)
    _, plain = run_main(capsys, {"host_root": str(root), "gather_gpu": False})
    assert set(plain["ansible_facts"]) == {"tee_host"}
