"""NFD v0.19.0's own discovery and rule engine on teesim's host trees (``scripts/upstream_nfd.py``), for
every kernel profile: Kata's ``kata-tee-keys`` rule against teesim's NFD model, the collection's rule
against its key-pool plan. A difference fails here and is fixed in the model or the collection."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import upstream_nfd as nfd

KATA_TDX = "tdx.intel.com/keys"
KATA_SNP = "sev-snp.amd.com/esids"


@pytest.fixture(scope="module")
def binaries(upstream_runnable):
    return nfd.build()


@pytest.fixture(scope="module")
def results(binaries):
    return {p.name: nfd.check_profile(binaries, p) for p in nfd.PROFILES}


@pytest.mark.slow
@pytest.mark.parametrize("profile", [p.name for p in nfd.PROFILES])
def test_nfd_advertises_what_the_model_and_the_plan_say(results, profile):
    result = results[profile]
    kata, ours = result["kata_rule"], result["collection_rule"]
    assert kata["nfd"]["extended_resources"] == kata["model"]["extended_resources"], result
    assert ours["nfd"]["labels"] == ours["plan"]["labels"], result
    assert ours["nfd"]["extended_resources"] == ours["plan"]["extended_resources"], result


@pytest.mark.slow
def test_the_comparison_is_not_vacuous(results):
    # NFD really read the trees: the key counts the profiles were built with, the labels Kata's rule sets.
    assert results["tdx-6.16"]["kata_rule"]["nfd"]["extended_resources"] == {KATA_TDX: "63"}
    assert results["tdx-6.16"]["kata_rule"]["nfd"]["labels"] == {"intel.feature.node.kubernetes.io/tdx": "true"}
    assert results["tdx-pre-6.6"]["kata_rule"]["nfd"]["extended_resources"] == {KATA_TDX: "31"}
    assert results["snp"]["kata_rule"]["nfd"]["extended_resources"] == {KATA_SNP: "99"}
    # Without a tdx misc line NFD still labels the node but cannot publish the key count.
    no_line = results["tdx-no-misc-resource"]["kata_rule"]["nfd"]
    assert no_line["labels"] and not no_line["extended_resources"]
    assert any("tdx.total_keys" in e for e in no_line["errors"])
    # Ciphertext hiding: Kata's rule copies the joint sev_es count, the collection's publishes the SNP range.
    hiding = results["snp-ciphertext-hiding"]
    assert hiding["kata_rule"]["nfd"]["extended_resources"] == {KATA_SNP: "99"}
    assert hiding["collection_rule"]["nfd"]["extended_resources"] == {KATA_SNP: "64"}


def test_the_table_names_every_profile_and_flags_a_difference():
    rows = [
        {
            "profile": p.name,
            "what": p.what,
            "cpu_security": {"tdx.enabled": "true"},
            "kata_rule": {"nfd": {"extended_resources": {}, "labels": {}}, "model": {"extended_resources": {}}},
            "collection_rule": {
                "nfd": {"extended_resources": {}, "labels": {}},
                "plan": {"extended_resources": {}, "labels": {}},
            },
            "kata_equal": p.name != "snp",
            "collection_equal": True,
        }
        for p in nfd.PROFILES
    ]
    text = nfd.table(rows)
    assert all(f"| {p.name} (" in text for p in nfd.PROFILES)
    assert text.count("**NO**") == 1
