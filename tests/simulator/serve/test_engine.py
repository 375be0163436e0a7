"""What serve runs: the served strategy, the scenario's serve section, what serve refuses, --fail-on."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest
from teesim.cli import main
from teesim.cluster.pods import Consumer, Guest
from teesim.serve.cli import FAIL_ON, fail_on, prepare_root
from teesim.serve.engine import ServedStrategy, check_servable
from teesim.sim.scenario import ScenarioError, load_scenario, parse_scenario

KV, NFD = "devices.kubevirt.io/tdx", "tdx.intel.com/keys"
NODE = {"name": "n", "vendor": "intel", "capacity": {"tdx": 4}}
SHORT = Path(__file__).resolve().parents[1] / "external_plugins" / "serve-short.yaml"


def scenario(**extra):
    return parse_scenario({"nodes": [NODE], "workloads": [], **extra}, "s.yaml")


def test_the_bundled_serve_scenario_is_a_double_pool_node():
    sc = load_scenario("serve-double-pool-tdx")
    assert sc.world.duration <= 60
    strategy = ServedStrategy.of(sc.serve)
    assert strategy.vmi_requests(Guest.TDX) == {KV: 1}
    assert strategy.kata_overhead("tdx") == {NFD: 1}
    assert strategy.layout("tdx").nfd_keys and strategy.layout("tdx").plugin is None
    # NFD serves Kata's name; the plugin's job is KubeVirt's.
    assert strategy.plugin_resources() == [("tdx", KV)]
    assert strategy.accounted("tdx") == frozenset({Consumer.KUBEVIRT.value})
    check_servable(sc)


def test_one_pool_for_both_consumers_from_the_plugin():
    sc = scenario(serve={"kubevirt": {"tdx": NFD}, "kata": {"tdx": NFD}, "nfd": False})
    strategy = ServedStrategy.of(sc.serve)
    assert not strategy.layout("tdx").nfd_keys
    assert strategy.plugin_resources() == [("tdx", NFD)]
    assert strategy.accounted("tdx") == frozenset({Consumer.KUBEVIRT.value, Consumer.KATA.value})


def test_a_consumer_without_a_name_requests_no_key():
    strategy = ServedStrategy.of(scenario(serve={"kata": {}}).serve)
    assert strategy.kata_overhead("tdx") == {}
    assert strategy.vmi_requests(Guest.TDX) == {KV: 1}  # the default: KubeVirt's name


@pytest.mark.parametrize(
    ("serve", "message"),
    [
        ({"kubevirt": {"tdx": "tdx"}}, "kubevirt.tdx: 'tdx' is not an extended resource name"),
        ({"kata": {"sgx": NFD}}, "unknown misc resource 'sgx'"),
        ({"nfd": "yes"}, "serve.nfd: expected true or false"),
        ({"plugins": []}, "unknown key(s) plugins"),
        ([], "expected a mapping"),
    ],
)
def test_a_wrong_serve_section_names_the_key(serve, message):
    with pytest.raises(ScenarioError, match=r"s\.yaml: serve") as info:
        scenario(serve=serve)
    assert message in str(info.value)


def test_serve_refuses_what_it_cannot_run():
    two = parse_scenario({"nodes": [{**NODE, "count": 2}], "workloads": []}, "two.yaml")
    with pytest.raises(ValueError, match="runs one node, the scenario has 2"):
        check_servable(two)
    faulty = scenario(faults=[{"kind": "plugin-crash", "node": "n", "at": 1}])
    with pytest.raises(ValueError, match="cannot inject faults"):
        check_servable(faulty)


def test_the_cli_says_what_is_wrong_and_exits_2(tmp_path, capsys):
    path = tmp_path / "two.yaml"
    path.write_text("nodes: [{name: n, capacity: {tdx: 2}, count: 2}]\nworkloads: []\n", encoding="utf-8")
    assert main(["serve", str(path), "--root", str(tmp_path / "root")]) == 2
    assert "teesim serve: error: " in (err := capsys.readouterr().err)
    assert "runs one node, the scenario has 2; keep one" in err
    long_root = tmp_path / ("x" * 120)
    assert main(["serve", "serve-double-pool-tdx", "--root", str(long_root)]) == 2
    assert "over the 107-byte limit" in capsys.readouterr().err


def _entry(**metrics):
    base = {
        "failed_launches": 0,
        "failed_outside_race_window": {"kata": 0, "kubevirt": 0, "external": 0},
        "admission_failures": 0,
        "pending_at_end": 0,
    }
    serve = {"registered_at_s": {KV: 0.4}, "plugins": [{"command": "p", "exit_status": 0, "exited_early": False}]}
    return {"metrics": {**base, **metrics}, "serve": serve}


def test_fail_on_holds_only_when_its_condition_does():
    assert fail_on(sorted(FAIL_ON), _entry()) == []
    held = fail_on(
        ["outside-race-window", "failed-launches"],
        _entry(failed_launches=3, failed_outside_race_window={"kata": 0, "kubevirt": 2, "external": 0}),
    )
    assert held == [
        "outside-race-window: 2 failed launch(es) outside the race window (kubevirt 2)",
        "failed-launches: 3 failed launch(es) (ENOSPC/EBUSY)",
    ]
    entry = _entry()
    entry["serve"]["registered_at_s"][KV] = None
    entry["serve"]["plugins"][0].update(exit_status=1, exited_early=True)
    assert fail_on(["not-registered", "plugin-exit"], entry) == [
        f"not-registered: never registered: {KV}",
        "plugin-exit: p exited with 1 before the end",
    ]


def test_a_plugin_that_cannot_start_ends_the_run_with_state_failed(tmp_path, capsys):
    root = Path(tempfile.mkdtemp(prefix="ts-", dir="/tmp"))
    try:
        argv = ["serve", str(SHORT), "--root", str(root), "--plugin", "/nonexistent/plugin", "--compare", "none"]
        assert main(argv) == 2
        state = json.loads((root / "teesim-serve.json").read_text(encoding="utf-8"))
        sockets = list((root / "var/lib/kubelet/device-plugins").iterdir())
    finally:
        shutil.rmtree(root, ignore_errors=True)
    assert state == {
        "state": "failed",
        "error": "--plugin '/nonexistent/plugin': cannot start '/nonexistent/plugin': No such file or directory",
    }
    assert sockets == []  # the kubelet stopped and took its sockets with it
    out, err = capsys.readouterr()
    assert out.startswith("teesim serve: ready {")
    assert "teesim serve: error: --plugin '/nonexistent/plugin'" in err


def test_an_unbalanced_plugin_command_is_refused_before_anything_starts(capsys):
    root = Path(tempfile.mkdtemp(prefix="ts-", dir="/tmp")) / "never"
    assert main(["serve", str(SHORT), "--root", str(root), "--plugin", "node 'plugin.js"]) == 2
    assert '--plugin "node \'plugin.js": No closing quotation' in capsys.readouterr().err
    assert not root.exists()
    root.parent.rmdir()


def test_a_root_with_someone_elses_files_is_refused_and_a_previous_runs_is_cleaned(tmp_path):
    mine = tmp_path / "data"
    mine.mkdir()
    (mine / "keep.txt").write_text("x", encoding="utf-8")
    with pytest.raises(ValueError, match="not empty and no teesim serve run left it"):
        prepare_root(mine, ["sys", "var"])
    assert (mine / "keep.txt").exists()
    previous = tmp_path / "previous"
    (previous / "sys/fs/cgroup/machine.slice").mkdir(parents=True)
    (previous / "teesim-serve.json").write_text("{}", encoding="utf-8")
    (previous / "notes").write_text("x", encoding="utf-8")
    prepare_root(previous, ["sys", "var"])
    assert not (previous / "sys").exists()
    assert (previous / "notes").exists()  # only what serve writes goes
    prepare_root(tmp_path / "new" / "root", ["sys"])
    assert (tmp_path / "new" / "root").is_dir()
