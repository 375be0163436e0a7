"""KvmKeys: launches fail with the errors KVM really returns (tdx.c: ENOSPC before the charge; sev.c: EBUSY
after it, ENOTTY for an empty SEV-ES range under ciphertext hiding)."""

from __future__ import annotations

import errno

import pytest
from teesim.kernel.kvm import SEV_ES_GUEST, SNP, KvmKeys
from teesim.kernel.misc import ChargeError
from teesim.kernel.node import Node, NodeSpec
from teesim.kernel.profiles import CURRENT


def test_tdx_hardware_exhaustion_is_enospc_and_counts_no_misc_event():
    keys = KvmKeys({"tdx": 2}, CURRENT)
    keys.ensure_cgroup("kubepods.slice")
    keys.try_charge("kubepods.slice", "tdx", 2)
    with pytest.raises(ChargeError) as raised:
        keys.try_charge("kubepods.slice", "tdx")
    assert raised.value.errno == errno.ENOSPC
    assert keys.events("tdx", "kubepods.slice") == 0  # the misc charge was never tried
    keys.uncharge("kubepods.slice", "tdx")
    keys.try_charge("kubepods.slice", "tdx")  # the KeyID came back


def test_tdx_cgroup_limit_is_ebusy_and_counted():
    keys = KvmKeys({"tdx": 63}, CURRENT)
    keys.ensure_cgroup("machine.slice")
    keys.set_max("machine.slice", "tdx", 1)
    keys.try_charge("machine.slice", "tdx")
    with pytest.raises(ChargeError) as raised:
        keys.try_charge("machine.slice", "tdx")
    assert raised.value.errno == errno.EBUSY and keys.events("tdx", "machine.slice") == 1
    keys.ensure_cgroup("kubepods.slice")
    keys.try_charge("kubepods.slice", "tdx")  # the failed launch freed its KeyID


def test_snp_past_its_range_is_ebusy_while_misc_current_shows_keys_free():
    keys = KvmKeys({"sev": 410, "sev_es": 99}, CURRENT, ciphertext_hiding_asids=16)
    keys.ensure_cgroup("kubepods.slice")
    keys.try_charge("kubepods.slice", "sev_es", 16)
    with pytest.raises(ChargeError) as raised:
        keys.try_charge("kubepods.slice", "sev_es")
    assert raised.value.errno == errno.EBUSY and "no free snp ASID in 1..16" in str(raised.value)
    assert keys.usage("sev_es") == 16 and keys.free("sev_es") == 83  # what every reader of misc.current sees
    assert keys.peak("sev_es") == 17  # the charge succeeded, then sev_asid_new undid it
    assert keys.events("sev_es", "kubepods.slice") == 0
    keys.try_charge("kubepods.slice", "sev_es", 83, guest=SEV_ES_GUEST)  # SEV-ES has 17..99
    assert keys.asids_in_use(SNP) == 16 and keys.asids_in_use(SEV_ES_GUEST) == 83


def test_sev_es_is_enotty_when_every_asid_went_to_snp():
    keys = KvmKeys({"sev": 410, "sev_es": 99}, CURRENT, ciphertext_hiding_asids=0xFFFFFFFF)
    keys.ensure_cgroup("machine.slice")
    with pytest.raises(ChargeError) as raised:
        keys.try_charge("machine.slice", "sev_es", guest=SEV_ES_GUEST)
    assert raised.value.errno == errno.ENOTTY and keys.usage("sev_es") == 0
    keys.try_charge("machine.slice", "sev_es", 99)  # SNP has the whole range


def test_without_hiding_snp_and_sev_es_share_one_range():
    keys = KvmKeys({"sev": 410, "sev_es": 4}, CURRENT)
    keys.ensure_cgroup("machine.slice")
    keys.try_charge("machine.slice", "sev_es", 2)
    keys.try_charge("machine.slice", "sev_es", 2, guest=SEV_ES_GUEST)
    with pytest.raises(ChargeError) as raised:
        keys.try_charge("machine.slice", "sev_es", guest=SEV_ES_GUEST)
    assert raised.value.errno == errno.EBUSY and keys.events("sev_es", "machine.slice") == 1  # the misc charge


def test_a_node_with_ciphertext_hiding_writes_the_parameter_and_enforces_it():
    node = Node(NodeSpec(vendor="amd", ciphertext_hiding_asids=16))
    assert node.static_files()["sys/module/kvm_amd/parameters/ciphertext_hiding_asids"] == "16\n"
    assert node.misc is not None and node.misc.snp_range == (1, 16) and node.misc.sev_es_range == (17, 99)
    plain = Node(NodeSpec(vendor="amd"))
    assert "sys/module/kvm_amd/parameters/ciphertext_hiding_asids" not in plain.static_files()


def test_a_kernel_that_does_not_count_tdx_keys_still_refuses_the_charge_as_before():
    keys = KvmKeys({"tdx": 0}, CURRENT)
    keys.ensure_cgroup("machine.slice")
    with pytest.raises(ChargeError) as raised:
        keys.try_charge("machine.slice", "tdx")
    assert raised.value.errno == errno.EINVAL  # no misc resource: the misc controller's answer, not a KeyID count
