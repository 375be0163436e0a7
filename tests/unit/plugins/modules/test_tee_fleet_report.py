"""tee_fleet_report: writes every format atomically and only on change, honest check mode, clear errors."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
import yaml
from ansible.module_utils.basic import AnsibleModule
from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import HostReader
from ansible_collections.confidential.tee.plugins.module_utils.host.host_facts import gather_host_facts
from ansible_collections.confidential.tee.plugins.module_utils.host.preflight import gather_preflight
from ansible_collections.confidential.tee.plugins.modules import tee_fleet_report
from teesim.fixtures.fleet import build_fleet

FILES = {"report.html", "report.md", "report.json", "tee-fleet.prom"}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """The simulated fleet (without the GPU capture) and the tee_host_info results of its hosts."""
    out = tmp_path_factory.mktemp("fleet")
    summary = build_fleet(out, captures=None)
    hosts = []
    for name in summary["nodes"]:
        root = str(out / "nodes" / name)
        host = HostReader(root)
        hosts.append({"name": name, "result": {"host": gather_preflight(host, gather_host_facts(host))}})
    return out, hosts


def args(dest: Path, fleet, **extra) -> dict:
    out, hosts = fleet
    return {"dest": str(dest), "hosts": hosts, "kubernetes_dir": str(out / "kubernetes"), **extra}


def test_writes_every_format_then_changes_nothing(run_module, tmp_path, fleet):
    dest = tmp_path / "report"
    first = run_module(tee_fleet_report, args(dest, fleet))
    assert first["changed"] is True and not first["failed"]
    assert {p.name for p in dest.iterdir()} == FILES | {"textfile"}
    assert sorted(p.name for p in (dest / "textfile").iterdir()) == [
        "snp-1.prom",
        "tdx-1.prom",
        "tdx-2.prom",
        "tdx-nomisc.prom",
        "tdx-old.prom",
    ]
    summary = first["summary"]
    assert summary["not_ready"] == ["tdx-nomisc"] and summary["critical"] == 4
    assert {f["id"] for f in first["findings"]} == {
        "double_pool",
        "external_usage",
        "stale_advertiser",
        "nfd_sev_prefix",
        "runtimeclass_unadvertised",
        "sev_es_uncounted",
    }
    assert json.loads((dest / "report.json").read_text())["summary"] == summary
    assert oct((dest / "report.html").stat().st_mode & 0o777) == "0o644"
    second = run_module(tee_fleet_report, args(dest, fleet))
    assert second["changed"] is False and not any(f["changed"] for f in second["changes"]["entries"])
    assert first["changes"]["written"] == [f["path"] for f in first["files"]]  # files: deprecated until 0.3.0
    assert second["changes"]["written"] == [] and [e["name"] for e in second["changes"]["entries"]] == [
        f["path"] for f in second["files"]
    ]


def test_check_mode_writes_nothing_and_diffs_the_markdown(run_module, tmp_path, fleet):
    dest = tmp_path / "report"
    result = run_module(tee_fleet_report, args(dest, fleet, _ansible_diff=True), check_mode=True)
    assert result["changed"] is True and not dest.exists()
    diffs = {d["after_header"].rsplit("/", 1)[1]: d for d in result["diff"]}
    assert set(diffs) == {"report.md", "tee-fleet.prom"} and diffs["report.md"]["before"] == ""


def test_writes_through_a_symlink(run_module, tmp_path, fleet):
    dest = tmp_path / "report"
    dest.mkdir()
    real = tmp_path / "published.md"
    real.write_text("old\n")
    (dest / "report.md").symlink_to(real)
    run_module(tee_fleet_report, args(dest, fleet, formats=["markdown"]))
    assert (dest / "report.md").is_symlink() and real.read_text().startswith("# TEE fleet report")


def test_only_the_formats_asked_for(run_module, tmp_path, fleet):
    dest = tmp_path / "report"
    run_module(tee_fleet_report, args(dest, fleet, formats=["json", "prometheus"], prometheus_per_node=False))
    assert {p.name for p in dest.iterdir()} == {"report.json", "tee-fleet.prom"}


def test_missing_kubernetes_files_are_problems(run_module, tmp_path, fleet):
    kube = tmp_path / "kube"
    kube.mkdir()
    (kube / "nodes.json").write_text((fleet[0] / "kubernetes" / "nodes.json").read_text())
    result = run_module(tee_fleet_report, args(tmp_path / "r", fleet, kubernetes_dir=str(kube)))
    assert f"{kube}/pods.json is missing: no pods" in result["problems"]


def test_kubernetes_file_that_is_not_json_fails_with_the_fix(run_module, tmp_path, fleet):
    kube = tmp_path / "kube"
    kube.mkdir()
    (kube / "nodes.json").write_text("apiVersion: v1\n")
    result = run_module(tee_fleet_report, args(tmp_path / "r", fleet, kubernetes_dir=str(kube)))
    assert result["failed"] and f"{kube}/nodes.json is not readable JSON" in result["msg"]
    assert "kubectl get <kind> -A -o json > nodes.json" in result["msg"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"resource_map": {"example.com/keys": "snp"}}, "resource_map values must be one of tdx, sev, sev_es"),
        ({"kubernetes_dir": "/nonexistent/dir"}, "kubernetes_dir /nonexistent/dir is not a directory"),
    ],
)
def test_bad_options_fail_clearly(run_module, tmp_path, fleet, extra, message):
    result = run_module(tee_fleet_report, args(tmp_path / "r", fleet, **extra))
    assert result["failed"] and message in result["msg"]


def test_two_hosts_on_one_node_fail(run_module, tmp_path, fleet):
    hosts = [{"name": "a", "node": "n"}, {"name": "b", "node": "n"}]
    result = run_module(tee_fleet_report, {"dest": str(tmp_path / "r"), "hosts": hosts})
    assert (
        result["failed"]
        and result["msg"] == "hosts a and b both name the Kubernetes node n: give each host its own node"
    )


def test_dest_that_is_a_file_fails(run_module, tmp_path, fleet):
    (tmp_path / "file").write_text("")
    result = run_module(tee_fleet_report, {"dest": str(tmp_path / "file"), "hosts": []})
    assert result["failed"] and "is not a directory" in result["msg"]


def test_documentation_matches_argument_spec(monkeypatch):
    captured = {}

    def fake_init(self, argument_spec, **kwargs):
        captured.update(argument_spec=argument_spec, **kwargs)
        raise SystemExit(0)

    monkeypatch.setattr(AnsibleModule, "__init__", fake_init)
    with pytest.raises(SystemExit):
        tee_fleet_report.main()
    documented = yaml.safe_load(tee_fleet_report.DOCUMENTATION)["options"]
    spec = captured["argument_spec"]
    assert set(spec) == set(documented) and captured["supports_check_mode"] is True
    for name, option in spec.items():
        assert option.get("type") == documented[name]["type"], name
        assert option.get("default") == documented[name].get("default"), name
        assert option.get("choices") == documented[name].get("choices"), name
    suboptions = documented["hosts"]["suboptions"]
    assert set(spec["hosts"]["options"]) == set(suboptions)
    for name, option in spec["hosts"]["options"].items():
        assert option.get("type") == suboptions[name]["type"], name
    yaml.safe_load(tee_fleet_report.EXAMPLES)
    yaml.safe_load(tee_fleet_report.RETURN)


def test_results_as_json_text_and_bad_results(run_module, tmp_path, fleet):
    hosts = fleet[1]
    as_text = [dict(host, result=json.dumps(host["result"])) for host in hosts]
    first = run_module(tee_fleet_report, args(tmp_path / "a", fleet))
    second = run_module(tee_fleet_report, dict(args(tmp_path / "b", fleet), hosts=as_text))
    assert first["summary"] == second["summary"]
    assert (tmp_path / "a" / "report.md").read_text() == (tmp_path / "b" / "report.md").read_text()
    wrong = run_module(tee_fleet_report, dict(args(tmp_path / "c", fleet), hosts=[{"name": "x", "result": "[1]"}]))
    assert wrong["failed"] and "hosts entry x: result must be the registered tee_host_info result" in wrong["msg"]


def kube_dir_with(tmp_path, fleet, kind, edit, raw):
    """A copy of the fleet's objects where ``edit`` puts a placeholder that becomes the raw JSON text ``raw``."""
    kube = tmp_path / "kube"
    shutil.copytree(fleet[0] / "kubernetes", kube)
    path = kube / kind
    document = json.loads(path.read_text())
    edit(document["items"], "@@QUANTITY@@")
    path.write_text(json.dumps(document).replace('"@@QUANTITY@@"', raw))
    return kube


def set_tdx_1_keys(items, value):
    (node,) = [n for n in items if n["metadata"]["name"] == "tdx-1"]
    node["status"]["capacity"]["tdx.intel.com/keys"] = value
    node["status"]["allocatable"]["tdx.intel.com/keys"] = value


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        ('"' + "9" * 10000 + '"', "(10000 characters) is more than the scheduler can count"),
        ("9" * 10000, "(10000 characters) is more than the scheduler can count"),
        ('"1e1000000000"', "'1e1000000000' is more than the scheduler can count"),
        ('"99999999999999999999999"', "'99999999999999999999999' is more than the scheduler can count"),
    ],
)
def test_counts_above_int64_are_capped_said_and_keep_their_series(run_module, tmp_path, fleet, raw, why):
    kube = kube_dir_with(tmp_path, fleet, "nodes.json", set_tdx_1_keys, raw)
    result = run_module(tee_fleet_report, args(tmp_path / "r", fleet, kubernetes_dir=str(kube)))
    assert not result.get("failed"), result.get("msg")
    problem = "Node tdx-1 status.capacity[tdx.intel.com/keys]: "
    assert any(p.startswith(problem) and why in p for p in result["problems"]), result["problems"]
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    (node,) = [n for n in report["nodes"] if n["node"] == "tdx-1"]
    (keys,) = [a for a in node["pools"]["tdx"]["advertised"] if a["name"] == "tdx.intel.com/keys"]
    assert keys["capacity"] == keys["allocatable"] == 2**63 - 1
    assert any(f["id"] == "stale_advertiser" and f["severity"] == "critical" for f in node["findings"])
    metrics = (tmp_path / "r" / "textfile" / "tdx-1.prom").read_text()
    series = 'tee_keys_advertised{node="tdx-1",resource="tdx",extended_resource="tdx.intel.com/keys"}'
    assert f"{series} 9223372036854775807" in metrics


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        ('"1e"', "'1e' has an unknown suffix 'e'"),
        ('"1Ex"', "'1Ex' is not a quantity"),
        ("1e400", "the JSON number inf is not a finite number"),
        ("NaN", "the JSON number nan is not a finite number"),
        ('"1500m"', "'1500m' is not a whole number (extended resources are counts)"),
        ("true", "True is a bool, not a quantity"),
    ],
)
def test_unreadable_node_quantities_are_problems_and_unknown(run_module, tmp_path, fleet, raw, why):
    kube = kube_dir_with(tmp_path, fleet, "nodes.json", set_tdx_1_keys, raw)
    started = time.monotonic()
    result = run_module(tee_fleet_report, args(tmp_path / "r", fleet, kubernetes_dir=str(kube)))
    assert time.monotonic() - started < 30
    assert not result.get("failed"), result.get("msg")
    problem = "Node tdx-1 status.capacity[tdx.intel.com/keys]: "
    assert any(p.startswith(problem) and why in p for p in result["problems"]), result["problems"]
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    (node,) = [n for n in report["nodes"] if n["node"] == "tdx-1"]
    (keys,) = [a for a in node["pools"]["tdx"]["advertised"] if a["name"] == "tdx.intel.com/keys"]
    assert keys["capacity"] is None and keys["allocatable"] is None and keys["unknown"]
    metrics = (tmp_path / "r" / "textfile" / "tdx-1.prom").read_text()
    # Unknown is left out, never written as 0.
    assert 'tee_keys_advertised{node="tdx-1",resource="tdx",extended_resource="tdx.intel.com/keys"}' not in metrics
    assert 'tee_keys_advertised{node="tdx-1",resource="tdx",extended_resource="devices.kubevirt.io/tdx"} 63' in metrics


def test_a_fractional_extended_resource_request_is_a_problem_not_rounded(run_module, tmp_path, fleet):
    def fractional(items, value):
        (pod,) = [p for p in items if p["metadata"]["name"] == "tdx-1-kata-web-0"]
        pod["spec"]["overhead"]["tdx.intel.com/keys"] = value

    kube = kube_dir_with(tmp_path, fleet, "pods.json", fractional, '"1500m"')
    result = run_module(tee_fleet_report, args(tmp_path / "r", fleet, kubernetes_dir=str(kube)))
    assert not result.get("failed"), result.get("msg")
    assert [p for p in result["problems"] if "1500m" in p] == [
        "Pod confidential/tdx-1-kata-web-0 spec.overhead[tdx.intel.com/keys]: '1500m' is not a whole number "
        "(extended resources are counts)"
    ]
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    (node,) = [n for n in report["nodes"] if n["node"] == "tdx-1"]
    (keys,) = [a for a in node["pools"]["tdx"]["advertised"] if a["name"] == "tdx.intel.com/keys"]
    assert keys["requested"] is None and keys["capacity"] == 63


def test_every_node_gets_its_own_valid_metrics_file(run_module, tmp_path, fleet):
    """A 253-character node name fits; names that differ only where a file name cannot show it stay apart."""
    _out, hosts = fleet
    longest = ".".join(["a" * 63, "b" * 63, "c" * 63, "d" * 61])
    names = [longest, "nœud-1", "nœud-2", "tdx-1", "snp-1"]
    renamed = [dict(host, node=name) for host, name in zip(hosts, names, strict=True)]
    result = run_module(tee_fleet_report, {"dest": str(tmp_path / "r"), "hosts": renamed})
    assert not result["failed"], result.get("msg")
    textfiles = result["textfiles"]
    assert set(textfiles) == set(names) and len(set(textfiles.values())) == len(names)
    assert Path(textfiles["tdx-1"]).name == "tdx-1.prom"
    for name, path in textfiles.items():
        assert len(Path(path).name.encode()) <= 255 and f'node="{name}"' in Path(path).read_text()
