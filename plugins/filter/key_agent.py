# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""Filters of the tee_key_agent role: the agent's files from this installed collection, and its systemd unit."""

from __future__ import annotations

from pathlib import Path

from ansible_collections.confidential.tee.plugins.module_utils.host import key_agent_unit as unit
from ansible_collections.confidential.tee.plugins.plugin_utils import agent_files
from ansible_collections.confidential.tee.plugins.plugin_utils.filter_refusal import refusing

# This collection as installed on the controller (plugins/filter/ is two levels below its root).
COLLECTION_ROOT = Path(__file__).resolve().parents[2]


def key_agent_files(prefix):
    """``confidential.tee.host_files`` entries: the agent's files of this collection under ``prefix``."""
    if not isinstance(prefix, str) or not prefix.startswith("/"):
        raise agent_files.AgentFilesError("the install prefix must be an absolute path, got %r" % (prefix,))
    return agent_files.host_files(COLLECTION_ROOT, prefix)


def key_agent_unit(options):
    """The text of confidential-tee-key-agent.service (module_utils/host/key_agent_unit.py)."""
    return unit.unit_text(options)


class FilterModule:
    def filters(self):
        errors = (agent_files.AgentFilesError, unit.KeyAgentUnitError, OSError, ValueError)
        return {f.__name__: refusing(f.__name__, f, errors) for f in (key_agent_files, key_agent_unit)}
