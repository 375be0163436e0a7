"""confidential.tee.tee_technology: a CPU vendor's TEE from the registry, run as Ansible runs filters."""

from __future__ import annotations

import pytest
from ansible_collections.confidential.tee.plugins.module_utils.common import tee_registry


@pytest.fixture
def tee_technology(call_filter):
    return lambda *args: call_filter("tee", "tee_technology", *args)


def test_each_vendor_gives_its_registry_record(tee_technology):
    assert tee_technology("intel") == {
        "value": {
            "key": "tdx",
            "short": "tdx",
            "name": "TDX",
            "vendor": "intel",
            "vendor_name": "Intel",
            "cpu_vendor": "GenuineIntel",
            "misc": "tdx",
            "host_role": "tdx_host",
            "preflight": "tdx",
            "runtime_classes": ["kata-qemu-tdx", "kata-qemu-nvidia-gpu-tdx"],
        }
    }
    for tech in tee_registry.REGISTRY:
        value = tee_technology(tech.vendor)["value"]
        assert (value["key"], value["misc"], value["host_role"]) == (tech.key, tech.misc, tech.host_role)


@pytest.mark.parametrize("vendor", ["auto", None, "", "arm", "Intel"])
def test_a_vendor_without_a_tee_gives_none(tee_technology, vendor):
    assert tee_technology(vendor) == {"value": None}
