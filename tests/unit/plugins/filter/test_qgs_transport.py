"""The qgs_transport filter: the role's transport from qgs_config's rule, errors as AnsibleFilterError."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    ("transport", "consumers", "kata", "expected"),
    [
        ("auto", ["kubevirt", "kata"], "", "both"),
        ("auto", ["kubevirt", "kata"], "3.31.0", "both"),
        ("auto", ["kubevirt", "kata"], "3.32.0", "unix"),
        ("auto", ["kata"], "3.31.0", "vsock"),
        ("unix", ["kubevirt"], None, "unix"),
    ],
)
def test_transport_for_the_consumers(call_filter, transport, consumers, kata, expected):
    assert call_filter("attestation", "qgs_transport", transport, consumers, kata) == {"value": expected}


@pytest.mark.parametrize(
    ("transport", "consumers", "kata", "fragment"),
    [
        ("unix", ["kata"], "3.31.0", "variable tdx_attestation_qgs_transport (argument transport): Kata 3.31"),
        ("auto", "kata", "", "as a list"),
        (
            "auto",
            ["kata"],
            "x.y",
            "inventory variable tdx_attestation_kata_version (argument kata_version): kata_version 'x.y' is not a "
            "Kata Containers release",
        ),
    ],
)
def test_refusals_name_the_variable(call_filter, transport, consumers, kata, fragment):
    assert fragment in call_filter("attestation", "qgs_transport", transport, consumers, kata)["filter_error"]
