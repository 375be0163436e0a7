"""AMD ciphertext hiding through a real ansible-playbook run: tee_host_info's sev_asids and preflight facts."""

from __future__ import annotations

import pytest
from teesim.kernel.cli import build_node_tree

pytestmark = pytest.mark.slow

TASKS = [
    {
        "name": "host",
        "confidential.tee.tee_host_info": {"host_root": "{{ node_root }}", "gather_gpu": False, "capacity": True},
    },
    {
        "name": "preflight",
        "confidential.tee.tee_host_info": {
            "host_root": "{{ node_root }}",
            "gather_gpu": False,
            "preflight": True,
            "min_free_keys": 20,
        },
    },
]


@pytest.fixture(scope="module")
def run(tmp_path_factory, playbook):
    root = tmp_path_factory.mktemp("nodes")
    hosts = {}
    for name, hiding in (("plain", None), ("split", 16), ("all-snp", 0xFFFFFFFF)):
        build_node_tree(root / name, vendor="amd", usage={"sev_es": 10}, ciphertext_hiding_asids=hiding)
        hosts[name] = {"node_root": str(root / name)}
    return playbook(tmp_path_factory.mktemp("run"), TASKS, hosts)


def test_every_host_ran(run):
    assert run.returncode == 0, run.stderr
    for host in ("plain", "split", "all-snp"):
        assert run.stats[host]["failures"] == 0 and run.stats[host]["changed"] == 0


def test_snp_and_sev_es_capacity_with_their_source(run):
    plain = run.result("host", "plain")["ansible_facts"]["tee_host"]["sev_asids"]
    assert plain["ciphertext_hiding"] is False and plain["snp"]["shared"] is True
    assert plain["snp"]["capacity"] == plain["sev_es"]["capacity"] == 99
    split = run.result("host", "split")["host"]["sev_asids"]
    assert (split["snp"]["capacity"], split["snp"]["asid_range"]) == (16, [1, 16])
    assert (split["sev_es"]["capacity"], split["sev_es"]["asid_range"]) == (83, [17, 99])
    assert "ciphertext_hiding_asids = 16" in split["snp"]["source"]
    everything = run.result("host", "all-snp")["host"]["sev_asids"]
    assert (everything["snp"]["capacity"], everything["sev_es"]["capacity"]) == (99, 0)


def test_preflight_bounds_free_snp_keys_by_the_snp_range(run):
    def found(host):
        sections = run.result("preflight", host)["host"]["preflight"]["sections"]
        return {c["id"]: c for s in sections for c in s["checks"]}

    assert found("plain")["keys.free"]["verdict"] == "PASS"  # 89 free, shared
    split = found("split")
    assert split["keys.free"]["verdict"] == "FAIL"  # 89 look free, SNP can have at most 16
    assert "SNP can use at most 16" in split["keys.free"]["detail"]
    assert "SEV-ES is unusable" in found("all-snp")["sev.snp_asids"]["detail"]
