"""module_refusal: a failed module result that names its refused option gets the host and the role's variable.

Controller code: it runs in a child interpreter (``controller_child``, ../conftest.py), never imported here."""

from __future__ import annotations

import pytest

CHILD = """
import json, sys
from ansible_collections.confidential.tee.plugins.plugin_utils.module_refusal import named
result, task_vars, component = json.loads(sys.stdin.read())
print(json.dumps(named(result, "dcap_config", task_vars, component)))
"""

IN_ROLE = {
    "role_name": "confidential.tee.tdx_attestation",
    "inventory_hostname": "tdx-1",
    "tdx_attestation_qgs_vsock_port": 0,
    "tdx_attestation_pccs_settings": {},
}


@pytest.fixture
def named(controller_child):
    def call(result, task_vars=IN_ROLE, component=None):
        return controller_child(CHILD, [result, task_vars, component])

    return call


def test_a_refusal_in_the_role_names_the_variable_and_the_host_and_drops_the_option_key(named):
    result = {"failed": True, "msg": "vsock port 0 cannot be configured", "refused_option": "vsock_port"}
    assert named(result, component="qgs") == {
        "failed": True,
        "msg": "confidential.tee.dcap_config on host tdx-1: inventory variable tdx_attestation_qgs_vsock_port "
        "(option vsock_port): vsock port 0 cannot be configured",
    }


def test_the_component_chooses_among_the_variables_of_one_option(named):
    result = {"failed": True, "msg": "unknown PCCS setting 'Bogus'", "refused_option": "settings.Bogus"}
    assert (
        "inventory variable tdx_attestation_pccs_settings (option settings.Bogus)"
        in named(result, component="pccs")["msg"]
    )


def test_outside_a_role_the_option_is_named(named):
    result = {"failed": True, "msg": "bad", "refused_option": "vsock_port"}
    assert named(result, {"inventory_hostname": "tdx-1"})["msg"] == (
        "confidential.tee.dcap_config on host tdx-1: option vsock_port: bad"
    )


def test_other_results_pass_unchanged(named):
    ok = {"changed": True, "msg": "written"}
    assert named(ok) == ok
    # A failure without an option (a file that does not parse) keeps its message as the module wrote it.
    broken = {"failed": True, "msg": "/etc/qgs.conf: line 3 does not parse"}
    assert named(broken) == broken
    assert "refused_option" not in named({"changed": False, "refused_option": "x"})
