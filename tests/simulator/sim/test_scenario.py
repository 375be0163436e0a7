"""Scenario files: bundled ones load; mistakes give messages that name the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from teesim.sim.scenario import ScenarioError, bundled_scenarios, load_scenario, parse_scenario

REQUIRED = {"quick", "tdx-external-vms", "tdx-kata-surge", "snp-mixed", "faults"}


def _base() -> dict[str, Any]:
    return {
        "nodes": [{"name": "n", "vendor": "intel", "capacity": {"tdx": 4}}],
        "workloads": [{"consumer": "kata", "resource": "tdx", "rate": 0.1, "duration": [1, 2]}],
    }


def test_bundled_scenarios_are_present_and_valid() -> None:
    bundled = bundled_scenarios()
    assert set(bundled) >= REQUIRED
    for path in bundled.values():
        scenario = load_scenario(str(path))
        assert scenario.world.arrivals
        assert scenario.description


def test_snp_scenario_charges_sev_es_for_snp_guests() -> None:
    scenario = load_scenario("snp-mixed")
    (node,) = scenario.world.nodes
    assert node.resolved_capacity() == {"sev": 410, "sev_es": 99}
    resources = {a.resource for a in scenario.world.arrivals}
    assert resources == {"sev", "sev_es"}


def test_node_count_expands_and_seed_override() -> None:
    data = _base()
    data["nodes"][0]["count"] = 3
    scenario = parse_scenario(data, "x.yaml", seed=9)
    assert [n.name for n in scenario.world.nodes] == ["n-1", "n-2", "n-3"]
    assert scenario.seed == 9


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d["nodes"][0].update(vendor="arm"), r"nodes\[0\]: unknown vendor 'arm'"),
        (lambda d: d["nodes"][0].update(capacity={"sev": 3}), "intel hosts have misc resources tdx"),
        (lambda d: d["nodes"][0].update(profile="new"), "unknown kernel profile 'new'"),
        (
            lambda d: d["workloads"][0].update(consumer="docker"),
            r"consumer: expected kata, kubevirt or external",
        ),
        (lambda d: d["workloads"][0].update(count=3), "give exactly one of rate"),
        (lambda d: d["workloads"][0].update(duration=[5, 1]), r"duration: expected seconds or \[low, high\]"),
        (lambda d: d["workloads"][0].update(resource="sev"), "Kata confidential guests are TDX or SNP"),
        (lambda d: d["workloads"][0].update(colour="red"), r"unknown key\(s\) colour"),
        (lambda d: d.update(faults=[{"kind": "meteor", "node": "n"}]), "kind: expected one of"),
        (lambda d: d.update(faults=[{"kind": "plugin-crash", "node": "m"}]), "unknown node 'm'"),
        (lambda d: d.update(settings={"poll_interval": 0}), r"poll_interval: expected a number >= 0.001"),
        (lambda d: d.update(seed="x"), "seed: expected an integer"),
        (lambda d: d.update(nodes=[]), "expected a non-empty list of nodes"),
        (lambda d: d["nodes"][0].update(ciphertext_hiding_asids=16), "AMD ciphertext hiding needs vendor: amd"),
        (lambda d: d["nodes"][0].update(ciphertext_hiding_asids=-1), "expected an unsigned 32-bit integer"),
    ],
)
def test_errors_name_the_key(mutate, message: str) -> None:
    data = _base()
    mutate(data)
    with pytest.raises(ScenarioError, match=message):
        parse_scenario(data, "x.yaml")


def test_missing_file_and_bad_yaml(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="no such file, and no bundled scenario"):
        load_scenario(str(tmp_path / "nope.yaml"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("nodes: [\n")
    with pytest.raises(ScenarioError, match="not valid YAML"):
        load_scenario(str(bad))


def test_settings_are_read() -> None:
    data = _base()
    data["settings"] = {"poll_interval": 0.5, "node_status_interval": 5, "reserved": {"tdx": 2}}
    settings = parse_scenario(data, "x.yaml").world.settings
    assert (settings.poll_interval, settings.node_status_interval, dict(settings.reserved)) == (0.5, 5.0, {"tdx": 2})
