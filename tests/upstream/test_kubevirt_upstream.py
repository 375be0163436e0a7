"""KubeVirt v1.9.0's own virt-handler device plugins against ``teesim serve`` (``scripts/upstream_kubevirt.py``):
started as virt-handler starts them, in a private mount and PID namespace over the served root, unpatched.
One seed of each served scenario here; the 30-seed comparison is ``make upstream-report``."""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import upstream_kubevirt as kv

SEED = 3
CAPACITY = 8  # the served node's misc.capacity tdx


@pytest.fixture(scope="module")
def reports(upstream_runnable):
    binary = kv.build()
    with ThreadPoolExecutor(max_workers=len(kv.PAIRS)) as pool:
        runs = pool.map(lambda pair: (pair[1], kv.serve_once(binary, pair[0], pair[1], SEED)), kv.PAIRS)
        return dict(runs)


@pytest.mark.slow
@pytest.mark.parametrize("model", [model for _, model in kv.PAIRS])
def test_kubevirts_plugin_advertises_misc_capacity_as_the_model_does(reports, model):
    report = reports[model]
    served, modelled = report["strategies"][kv.SERVED], report["strategies"][model]
    upstream = kv.metrics_of(served)
    # KubeVirt read misc.capacity through /proc/1/root once and advertised it for the whole run, as the static model.
    assert upstream["advertised_kubevirt_min"] == upstream["advertised_kubevirt_max"] == CAPACITY
    assert kv.metrics_of(modelled)["advertised_kubevirt_max"] == CAPACITY
    assert served["serve"]["registered_at_s"][kv.TDX] is not None
    assert upstream["launched.kubevirt"] >= 1
    log = report["plugin_log"]
    assert "devices.kubevirt.io/tdx device plugin started" in log
    # The kubelet's Allocate reached KubeVirt's own TDX plugin for the VMIs it admitted.
    assert "Socket Allocate: resourceName: tdx" in log


def test_the_plugin_command_runs_kubevirt_in_the_serve_namespace(tmp_path):
    command = kv.plugin_command(tmp_path / "kubevirt-plugins")
    assert "--cgroup --pid --run-dir tdx-qgs $TEESIM_HOST_ROOT" in command
    assert "--feature-gates WorkloadEncryptionTDX" in command


def test_the_table_gives_means_intervals_and_agreement():
    def metrics(value):
        return {key: value for key, _ in kv.METRICS}

    runs = [
        {"scenario": Path(s).stem, "model": m, "seed": seed, "upstream": metrics(seed % 2), "modelled": metrics(0)}
        for s, m in kv.PAIRS
        for seed in (1, 2, 3, 4)
    ]
    text = kv.table(runs)
    assert "4 seeds (1..4)" in text
    assert "| 0.5 [" in text and "| 0 |" not in text
    assert "| 2/4 |" in text


@pytest.mark.slow
def test_nfds_rule_engine_publishes_the_pool_the_double_pool_runs_model(upstream_runnable):
    # The served double-pool runs take Kata's pool from teesim's NFD model; NFD's own code agrees on that node.
    keys = {"tdx.intel.com/keys": str(CAPACITY)}
    assert kv.nfd_pool("serve-double-pool-tdx") == {"nfd": keys, "model": keys}
