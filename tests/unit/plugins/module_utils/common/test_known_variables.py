"""Unknown inventory variables with the collection's prefixes, and the names they probably meant."""

from __future__ import annotations

import re
from pathlib import Path

from ansible_collections.confidential.tee.plugins.module_utils.common.known_variables import (
    describe,
    known_variables,
    prefixes,
    unknown_variables,
)


def test_a_singular_typo_is_reported_with_the_plural_it_meant():
    known, owned = known_variables()
    seen = {"tdx-1": ["tee_node_consumer", "tee_host_root", "ansible_host"], "localhost": []}
    (entry,) = unknown_variables(seen, known, owned)
    assert entry == {"name": "tee_node_consumer", "hosts": ["tdx-1"], "did_you_mean": "tee_node_consumers"}
    assert "did you mean tee_node_consumers?" in describe(entry, len(seen))


def test_every_role_and_playbook_variable_is_known_and_other_prefixes_are_ignored():
    known, owned = known_variables()
    # A role variable (argument specs), a playbook variable (role_inputs' playbook_variables), a fact the
    # collection sets, a module's fact; private and foreign names are never reported.
    names = [
        "tdx_host_reboot_ok",
        "tee_fleet_report_dir",
        "tee_node_reboot_required",
        "tee_host",
        "__tdx_host_x",
        "kubevirt_namespace",
        "my_tee_thing",
    ]
    assert unknown_variables({"h": names}, known, owned) == []
    assert "tdx_attestation_" in owned and "tee_" in owned and "role_inputs_" not in owned


def test_an_extra_var_typo_names_every_host_once():
    entry = unknown_variables({"a": ["vsock_modulez"], "b": ["vsock_modulez"]}, {"vsock_modules"}, prefixes(["vsock"]))
    assert entry[0]["did_you_mean"] == "vsock_modules"
    assert "set for every host" in describe(entry[0], 2)
    far = unknown_variables({"a": ["tee_zzz"]}, {"tee_output"}, prefixes([]))
    assert far[0]["did_you_mean"] is None and "no role or playbook reads it" in describe(far[0], 1)


def test_every_variable_a_playbook_documents_in_its_header_is_known():
    # The header comment of each playbook lists the inventory variables it reads ("#   tee_state: ..."): a user
    # who sets one of them must never be told that no role or playbook reads it.
    known, _ = known_variables()
    playbooks = Path(__file__).parents[5] / "playbooks"
    documented = {
        match.group(1)
        for path in playbooks.glob("*.yml")
        for match in re.finditer(r"^#\s+(tee_[a-z0-9_]+):", path.read_text(encoding="utf-8"), re.MULTILINE)
    }
    assert "tee_state" in documented
    assert sorted(documented - known) == []
