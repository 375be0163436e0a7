"""kube-scheduler v1.37.2 binding teesim's pods (``scripts/upstream_scheduler.py``) on a real control plane
(``scripts/kube_control_plane.py``, the live tests' helper, here with its scheduler), beside teesim's scheduler
model on the same seeds. Three seeds of each strategy here; the 30-seed table is ``make upstream-report``."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import upstream_scheduler as us
from teesim.sim.kube_scheduler import ApiClient, KubeScheduler, amounts, quantities

SEEDS = [3, 4, 5]  # seed 4: Kata pods refused for want of devices.kubevirt.io/tdx


@pytest.fixture(scope="module")
def api():
    if shutil.which("go") is None:
        pytest.skip("no go on PATH: the control plane is built from the Go module proxy (make k8s)")
    from kube_control_plane import ControlPlane

    with ControlPlane(scheduler=True) as plane:
        client = ApiClient.from_kubeconfig(plane.admin_kubeconfig)
        yield client
        client.close()


@pytest.fixture(scope="module")
def runs(api):
    return us.sweep(api, SEEDS)


def _of(runs, strategy):
    return [r for r in runs if r["strategy"] == strategy]


@pytest.mark.slow
def test_the_double_pool_fails_guests_with_the_real_scheduler(runs):
    double = _of(runs, "double-pool")
    # kube-scheduler sees 16 schedulable keys (8 devices + 8 of NFD's) for 8 real ones, binds the pods, and KVM
    # refuses guests it placed.
    assert all(r["placements"]["bound"] > 0 for r in double)
    assert sum(r["upstream"]["guests_failed_to_start"] for r in double) > 0
    assert sum(r["upstream"]["failed_launches_by_consumer.kubevirt"] for r in double) > 0


# unified-reconciling: one plugin under Kata's name polling misc.current. kernel-pool (tee_key_pool_mode: kernel): the
# agent's decision code keeping the Node's tdx.intel.com/keys; Kata asks for it by overhead, launcher pods by a
# container request.
@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["unified-reconciling", "kernel-pool"])
def test_one_pool_fails_none_outside_the_race_window_with_the_real_scheduler(runs, strategy):
    one = _of(runs, strategy)
    for r in one:
        assert r["upstream"]["failed_outside_race_window.kubevirt"] == 0, r
        assert r["upstream"]["failed_outside_race_window.kata"] == 0, r
    assert sum(r["placements"]["bound"] for r in one) > 0
    # Not vacuous: kube-scheduler kept pods off the node while the pool had no free key.
    refused = [message for r in one for _, message in r["placements"]["refused"]]
    assert refused and all("Insufficient tdx.intel.com/keys" in m for m in refused), refused


@pytest.mark.slow
def test_kube_scheduler_counts_kata_overhead_on_kubevirts_resource(runs):
    # The collection's one pool: Kata's RuntimeClass overhead names devices.kubevirt.io/tdx, which the real
    # scheduler counts (NodeResourcesFit adds spec.overhead): Kata pods are refused when the devices are taken.
    refused = [(pod, m) for r in _of(runs, "kata-overhead-on-kubevirt") for pod, m in r["placements"]["refused"]]
    assert any(pod.startswith("kata-") and "Insufficient devices.kubevirt.io/tdx" in m for pod, m in refused)


@pytest.mark.slow
def test_the_real_scheduler_and_the_model_agree_on_every_decision_and_metric(runs):
    for r in runs:
        placements = r["placements"]
        assert placements["fit_disagreements"] == [], r
        assert placements["overhead_mismatches"] == [], r
        assert r["upstream"] == r["modelled"], r
    text = us.table(runs)
    assert "where kube-scheduler and the model differ: 0;" in text
    assert "| serve-double-pool-tdx | unified-reconciling | failed outside the race window, KubeVirt |" in text


@pytest.mark.slow
def test_the_same_seed_gives_the_same_run(api, runs):
    again = us.run_once(api, "unified-reconciling", SEEDS[0])
    first = _of(runs, "unified-reconciling")[0]
    assert again["upstream"] == first["upstream"]
    keep = ("decisions", "bound", "refused", "fit_disagreements")
    assert {k: again["placements"][k] for k in keep} == {k: first["placements"][k] for k in keep}


class _Recorder:
    """Stands in for the API server where only the objects the placer would send are checked."""

    calls = 0

    def call(self, method, path, body=None, content_type="application/json"):
        return body


def test_pods_are_what_kata_and_kubevirt_create():
    from teesim.cluster.pods import Guest, kata_pod, vmi_pod
    from teesim.sim.scenario import load_scenario
    from teesim.sim.simulation import Simulation
    from teesim.strategies import STRATEGIES

    placer = KubeScheduler(_Recorder(), "ns")
    placer._sim = Simulation(load_scenario("serve-double-pool-tdx").world, STRATEGIES["double-pool"])
    kata = placer.pod_object(kata_pod("kata-00001", Guest.TDX, 0, 1, 5, {"tdx.intel.com/keys": 1}))
    assert kata["spec"]["runtimeClassName"] == "kata-qemu-tdx.double-pool"
    assert "overhead" not in kata["spec"]  # RuntimeClass admission sets it
    assert kata["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "1000m", "memory": "2048Mi"}
    vmi = placer.pod_object(vmi_pod("kubevirt-00002", Guest.TDX, {"devices.kubevirt.io/tdx": 1}, 0, 1, 5))
    assert vmi["metadata"]["name"] == "virt-launcher-kubevirt-00002"
    resources = vmi["spec"]["containers"][0]["resources"]
    assert resources["limits"] == {"devices.kubevirt.io/tdx": "1"}
    assert amounts(resources["requests"]) == {"cpu": 200, "memory": 4346, "devices.kubevirt.io/tdx": 1}


def test_quantities_round_trip_as_the_api_server_writes_them():
    assert amounts({"cpu": "1", "memory": "2Gi", "tdx.intel.com/keys": "1"}) == {
        "cpu": 1000,
        "memory": 2048,
        "tdx.intel.com/keys": 1,
    }
    assert amounts(quantities({"cpu": 200, "memory": 4346})) == {"cpu": 200, "memory": 4346}
