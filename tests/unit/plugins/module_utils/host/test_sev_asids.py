"""sev_asids: the SNP / SEV-ES split of AMD ciphertext hiding, read from host trees as KVM (6.18+) leaves them."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import HostReader
from ansible_collections.confidential.tee.plugins.module_utils.host.capacity_facts import capacity_facts
from ansible_collections.confidential.tee.plugins.module_utils.host.host_facts import gather_host_facts
from ansible_collections.confidential.tee.plugins.module_utils.host.preflight import gather_preflight
from ansible_collections.confidential.tee.plugins.module_utils.host.sev_asids import (
    CIPHERTEXT_HIDING_PARAM,
    parse_ciphertext_hiding,
    sev_asid_split,
)
from teesim.kernel.cli import build_node_tree


def amd_tree(tmp_path: Path, hiding: int | None, **kwargs) -> Path:
    root = tmp_path / "node"
    build_node_tree(root, vendor="amd", ciphertext_hiding_asids=hiding, **kwargs)
    return root


def split_of(root: Path, capacity: bool = True) -> dict:
    facts = gather_host_facts(HostReader(str(root)))
    return sev_asid_split(facts["kvm"]["amd"], capacity_facts(HostReader(str(root))) if capacity else None)


def test_kernel_without_the_parameter_shares_one_joint_range(tmp_path):
    split = split_of(amd_tree(tmp_path, None))
    assert split["ciphertext_hiding"] is False
    assert split["snp"] == split["sev_es"]
    assert split["snp"]["capacity"] == 99 and split["snp"]["shared"] is True
    assert split["snp"]["source"].startswith("misc.capacity sev_es (joint SEV-ES/SNP range: no ciphertext_hiding")


def test_zero_means_off(tmp_path):
    split = split_of(amd_tree(tmp_path, 0))
    assert split["ciphertext_hiding"] is False and split["snp"]["capacity"] == 99
    assert "ciphertext_hiding_asids is 0" in split["snp"]["source"]


def test_hiding_splits_snp_1_to_n_and_sev_es_the_rest(tmp_path):
    split = split_of(amd_tree(tmp_path, 16))
    assert split["ciphertext_hiding"] is True and split["ciphertext_hiding_asids"] == 16
    assert (split["snp"]["capacity"], split["snp"]["asid_range"]) == (16, [1, 16])
    assert (split["sev_es"]["capacity"], split["sev_es"]["asid_range"]) == (83, [17, 99])
    expected = " = 16 (Linux arch/x86/kvm/svm/sev.c (6.18+): SNP ASIDs 1..N)"
    assert split["snp"]["source"].endswith(CIPHERTEXT_HIDING_PARAM + expected)
    assert "an SNP launch past ASID 16 fails with EBUSY while keys look free" in split["summary"]


def test_every_asid_to_snp_makes_sev_es_unusable(tmp_path):
    # -1u on the command line: KVM caps it at MIN_SEV_ASID - 1 and writes that back.
    split = split_of(amd_tree(tmp_path, 0xFFFFFFFF))
    assert split["snp"]["capacity"] == 99 and split["sev_es"]["capacity"] == 0
    assert split["sev_es"]["asid_range"] is None
    assert "SEV-ES is unusable" in split["summary"] and "ENOTTY" in split["summary"]


def test_without_the_capacity_the_snp_count_is_still_known_and_sev_es_is_not(tmp_path):
    split = split_of(amd_tree(tmp_path, 16), capacity=False)
    assert split["snp"]["capacity"] == 16
    assert split["sev_es"]["capacity"] is None
    assert any("capacity: true" in reason for reason in split["reasons"])


def test_the_joint_count_falls_back_to_cpuid(tmp_path):
    root = amd_tree(tmp_path, 10, registers=True)
    (root / "sys/fs/cgroup/misc.capacity").write_text("sev 410\nsev_es many\n")  # garbled: unknown, not 0
    host = HostReader(str(root))
    facts = gather_preflight(host, gather_host_facts(host))
    split = facts["sev_asids"]
    assert split["joint"] == {"capacity": 99, "source": "CPUID 0x8000001F EDX (min SEV ASID) - 1"}
    assert split["sev_es"]["capacity"] == 89


@pytest.mark.parametrize(
    ("text", "asids", "problem"),
    [
        ("16\n", 16, None),
        ("0\n", 0, None),
        ("max\n", None, "value 'max' is not what upstream KVM prints"),
        ("-1\n", None, "unexpected value '-1'"),
        ("4294967296\n", None, "unexpected value"),
        ("\uff11\uff16\n", None, "unexpected value"),  # full-width digits: str.isdigit() alone would take them
        ("", None, "unexpected value ''"),
    ],
)
def test_parameter_values(text, asids, problem):
    value, found = parse_ciphertext_hiding(text)
    assert value == asids
    assert (found is None) if problem is None else found.startswith(problem)


def test_a_garbled_parameter_is_unknown_with_the_reason_never_a_number(tmp_path):
    root = amd_tree(tmp_path, 16)
    (root / CIPHERTEXT_HIDING_PARAM).write_text("max\n")
    facts = gather_host_facts(HostReader(str(root)))
    split = sev_asid_split(facts["kvm"]["amd"], capacity_facts(HostReader(str(root))))
    assert split["ciphertext_hiding"] is None
    assert split["snp"]["capacity"] is None and split["sev_es"]["capacity"] is None
    assert "draft" in split["reasons"][0]
    assert any(w["path"].endswith("ciphertext_hiding_asids") for w in facts["warnings"])


def test_snp_disabled_in_kvm_has_no_snp_capacity(tmp_path):
    root = amd_tree(tmp_path, 16)
    (root / "sys/module/kvm_amd/parameters/sev_snp").write_text("N\n")
    split = split_of(root)
    assert split["snp"]["capacity"] == 0 and split["sev_es"]["capacity"] == 83


def test_preflight_says_what_the_split_means_and_bounds_free_snp_keys(tmp_path):
    root = amd_tree(tmp_path, 16, usage={"sev_es": 10}, registers=True)
    host = HostReader(str(root))
    verdict = gather_preflight(host, gather_host_facts(host), 8)["preflight"]
    found = {c["id"]: c for s in verdict["sections"] for c in s["checks"]}
    assert found["sev.snp_asids"]["verdict"] == "PASS"
    assert found["sev.snp_asids"]["detail"].startswith("ciphertext hiding on: SNP guests get ASIDs 1..16 (16 ASIDs)")
    assert found["keys.free"]["detail"] == (
        "sev_es: 89 of 99 free (10 in use); SNP can use at most 16 of them (ciphertext hiding: SNP ASIDs 1..16)"
    )
    assert found["keys.free"]["verdict"] == "PASS"
    host = HostReader(str(root))
    verdict = gather_preflight(host, gather_host_facts(host), 17)["preflight"]
    found = {c["id"]: c for s in verdict["sections"] for c in s["checks"]}
    assert found["keys.free"]["verdict"] == "FAIL"  # 89 look free, but only 16 can be SNP


def test_every_answer_has_a_summary_and_separate_pools():
    for amd in ({"loaded": False}, {"loaded": True, "ciphertext_hiding": {"present": True, "asids": None}}):
        split = sev_asid_split(amd)
        assert split["summary"].startswith("SNP/SEV-ES ASID split unknown: ")
        assert split["snp"] is not split["sev_es"] and split["snp"]["capacity"] is None
