"""input_names: a filter's refusal names the filter, the host (and Kubernetes node) and the inventory variable."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.confidential.tee.plugins.module_utils.cluster import kubevirt_cc as kv
from ansible_collections.confidential.tee.plugins.module_utils.cluster import kubevirt_objects, runtimeclasses
from ansible_collections.confidential.tee.plugins.module_utils.cluster.gpu_cc import kubelet_dropin, kubelet_gates
from ansible_collections.confidential.tee.plugins.module_utils.common.errors import TeeError
from ansible_collections.confidential.tee.plugins.module_utils.common.input_names import (
    DEPRECATED_HOST_ROOTS,
    HOST_ROOT,
    HOST_ROOT_REMOVED_IN,
    module_refusal,
    one_host_root,
    refusal,
    variable_for,
)

KUBEVIRT_VARS = {"kubevirt_cc_qgs_socket_path", "kubevirt_cc_tdx_attestation", "kubevirt_cc_version"}


def test_the_refusal_names_host_node_variable_and_keeps_the_fix():
    message = refusal(
        "kubevirt_cc",
        "must be absolute; set it to /var/run/tdx-qgs/qgs.socket",
        "qgs_socket_path",
        "confidential.tee.kubevirt_cc",
        "tdx-1",
        "node-a",
        KUBEVIRT_VARS.__contains__,
    )
    assert message == (
        "confidential.tee.kubevirt_cc on host tdx-1 (Kubernetes node node-a): inventory variable "
        "kubevirt_cc_qgs_socket_path: must be absolute; set it to /var/run/tdx-qgs/qgs.socket"
    )


def test_aliases_machineconfig_roles_and_unknown_variables():
    assert variable_for("kubevirt_cc", "attestation_mode", KUBEVIRT_VARS.__contains__) == "kubevirt_cc_tdx_attestation"
    assert variable_for("kubevirt_cc", "kubevirt_version", KUBEVIRT_VARS.__contains__) == "kubevirt_cc_version"
    assert variable_for("confidential.tee.tdx_host", "role", {"tdx_host_machineconfig_role"}.__contains__) == (
        "tdx_host_machineconfig_role"
    )
    # Called outside a role, or for an argument no variable of the role holds: the filter's own argument is named.
    assert variable_for(None, "qgs_socket_path", KUBEVIRT_VARS.__contains__) is None
    message = refusal("kubevirt_cc", "bad", "qgs_socket_path", None, "localhost", None, lambda _name: False)
    assert message == "confidential.tee.kubevirt_cc on host localhost: argument qgs_socket_path: bad"


PLAN = {"kubevirt": {"tdx_nodes": ["tdx-1"], "sev_nodes": []}, "kata": {}, "nodes": {}}


@pytest.mark.parametrize(
    ("call", "option"),
    [
        (lambda: kv.tdx_attestation(["tdx-1"], {}, "auto", "var/run/qgs.socket"), "qgs_socket_path"),
        (lambda: kv.tdx_attestation(["tdx-1"], {}, "sometimes"), "attestation_mode"),
        (lambda: kv.tdx_attestation(["tdx-1"], {}, "enforced"), "attestation_mode"),
        (lambda: kv.gpu_devices([{"pci_vendor_selector": "nvidia"}]), "gpu_devices"),
        (lambda: kv.tdx_version(["tdx-1"], "one"), "kubevirt_version"),
        (lambda: kubelet_gates("not a mapping", None), "kubelet_feature_gates"),
        (lambda: kubelet_dropin({}, "twenty minutes"), "runtime_request_timeout"),
        (lambda: runtimeclasses.kata_classes({"kata": {}}, overheads=["2048Mi"]), "overheads"),
        (lambda: runtimeclasses.kata_classes({"kata": {}}, node_selector={"a": 1}), "node_selector"),
    ],
)
def test_refusals_reachable_from_role_inputs_say_which_input(call, option):
    with pytest.raises(TeeError) as caught:
        call()
    assert caught.value.option == option, str(caught.value)


def test_the_kubevirt_render_refuses_a_relative_socket_as_its_option():
    with pytest.raises(TeeError) as caught:
        kubevirt_objects.render(
            {"kubevirt": {"tdx_nodes": ["tdx-1"], "sev_nodes": [], "nodes": []}, "kata": {}, "nodes": {}},
            [],
            {"name": "kubevirt", "namespace": "kubevirt", "qgs_socket_path": "run/qgs.socket"},
        )
    assert caught.value.option == "qgs_socket_path"


TDX_ATTESTATION_VARS = {
    "tdx_attestation_qgs_socket_group",
    "tdx_attestation_consumers",
    "tdx_attestation_pccs_url",
    "tdx_attestation_qcnl_settings",
    "tdx_attestation_pccs_settings",
    "tdx_attestation_pccs_port",
    "tdx_attestation_mpa_settings",
    "tdx_attestation_mpa_subscription_key",
}


@pytest.mark.parametrize(
    ("option", "component", "variable"),
    [
        ("socket_group", "qgs", "tdx_attestation_qgs_socket_group"),  # an alias
        ("consumers", "qgs", "tdx_attestation_consumers"),  # <role>_<option>
        ("settings.pccs_url", "qcnl", "tdx_attestation_pccs_url"),  # a key the role fills from its own variable
        ("settings.retry_times", "qcnl", "tdx_attestation_qcnl_settings"),  # any other key: the role's dict
        ("settings.HTTPS_PORT", "pccs", "tdx_attestation_pccs_port"),
        ("settings.uri", "pccs", "tdx_attestation_pccs_settings"),  # the same option, another component's variable
        ("settings.log_level", "mpa", "tdx_attestation_mpa_settings"),
        ("secrets.subscription_key", "mpa", "tdx_attestation_mpa_subscription_key"),
        ("settings.retry_times", None, None),  # no component: a settings key is not guessed
        ("timeout", None, None),  # no variable of the role holds it
    ],
)
def test_a_module_option_is_named_by_the_variable_the_role_fills_it_from(option, component, variable):
    found = variable_for("confidential.tee.tdx_attestation", option, TDX_ATTESTATION_VARS.__contains__, component)
    assert found == variable


def test_a_module_refusal_names_host_variable_and_option_and_outside_a_role_the_option():
    def message(role):
        return module_refusal(
            "dcap_config",
            "QCNL setting retry_times must be a JSON int",
            "settings.retry_times",
            role,
            "tdx-1",
            "node-a",
            TDX_ATTESTATION_VARS.__contains__,
            "qcnl",
        )

    assert message("tdx_attestation") == (
        "confidential.tee.dcap_config on host tdx-1 (Kubernetes node node-a): inventory variable "
        "tdx_attestation_qcnl_settings (option settings.retry_times): QCNL setting retry_times must be a JSON int"
    )
    assert message(None) == (
        "confidential.tee.dcap_config on host tdx-1 (Kubernetes node node-a): option settings.retry_times: QCNL "
        "setting retry_times must be a JSON int"
    )
    # A variable the role does not define (a role of the user's own of the same name) is never named.
    assert "inventory variable" not in module_refusal(
        "dcap_config", "bad", "socket_group", "tdx_attestation", "tdx-1", None, lambda _name: False
    )


def test_the_host_root_is_tee_host_root_and_the_roles_own_names_are_only_read():
    assert one_host_root(None, {}) == ("/", [])
    assert one_host_root("/host", {"vsock_host_root": None}) == ("/host", [])
    # A deprecated name alone still works, and is reported so the filter can warn.
    assert one_host_root(None, {"vsock_host_root": "/host"}) == ("/host", ["vsock_host_root"])
    both = {"snp_host_host_root": "/host", "vsock_host_root": "/host"}
    assert one_host_root("/host", both) == ("/host", ["snp_host_host_root", "vsock_host_root"])


@pytest.mark.parametrize(
    ("root", "deprecated"),
    [
        ("/node", {"vsock_host_root": "/other"}),
        (None, {"tdx_host_host_root": "/a", "iommu_passthrough_host_root": "/b"}),
    ],
)
def test_two_roots_for_one_host_are_refused_naming_both(root, deprecated):
    with pytest.raises(TeeError, match="given twice, differently") as caught:
        one_host_root(root, deprecated)
    for name, value in deprecated.items():
        assert f"{name}: {value}" in str(caught.value)
    assert f"set {HOST_ROOT} alone" in str(caught.value)


def test_a_host_root_that_is_no_path_or_no_known_name_is_refused():
    with pytest.raises(TeeError, match="tee_host_root must be a non-empty path"):
        one_host_root("", {})
    with pytest.raises(TeeError, match="vsock_host_root must be a non-empty path"):
        one_host_root(None, {"vsock_host_root": ["/"]})
    with pytest.raises(TeeError, match="kubevirt_cc_host_root is no name of the host root"):
        one_host_root(None, {"kubevirt_cc_host_root": "/"})
    assert len(DEPRECATED_HOST_ROOTS) == 7


def test_a_refused_host_root_names_tee_host_root_first_then_the_deprecated_name():
    assert variable_for("confidential.tee.vsock", "host_root", {"tee_host_root", "vsock_host_root"}.__contains__) == (
        "tee_host_root"
    )
    assert variable_for("confidential.tee.vsock", "host_root", {"vsock_host_root"}.__contains__) == "vsock_host_root"
    assert variable_for("confidential.tee.vsock", "host_root", set().__contains__) is None


def test_the_filter_announces_the_removal_version_the_rule_names():
    # The filter writes the version out (ansible-test's pylint reads only a literal): it must be this one.
    source = (Path(__file__).parents[5] / "plugins" / "filter" / "roots.py").read_text()
    assert f'version="{HOST_ROOT_REMOVED_IN}"' in source
