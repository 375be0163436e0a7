# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""``confidential-tee-key-agent.service``: the kernel key-pool agent as a systemd service on a plain host.

The agent is the collection's own Python (``plugins/module_utils/agent``), copied by the ``tee_key_agent`` role
under ``<prefix>/ansible_collections/confidential/tee/`` and run as ``python3 -m <its cli>`` with ``<prefix>`` on
``PYTHONPATH``; its options are the contract's (``--node``, ``--host-root``, ``--kubeconfig``, ``--interval``,
``--reserve``, ``--dry-run``, ``--log-format``). Every value goes through the systemd emitter, one argument per
word, so no value can add an argument or a setting.

It runs as root without capabilities: it reads the kubeconfig (root's, 0600) and the root cgroup's misc files
(0444), and writes nothing on the host; the sandbox settings make the rest of the system read-only to it.

Standard library only.
"""

from __future__ import annotations

import re

from ansible_collections.confidential.tee.plugins.module_utils.common.emit import systemd
from ansible_collections.confidential.tee.plugins.module_utils.common.errors import TeeError

UNIT = "confidential-tee-key-agent.service"
UNIT_PATH = "/etc/systemd/system/" + UNIT
CLI_MODULE = "ansible_collections.confidential.tee.plugins.module_utils.agent.cli"
LOG_FORMATS = ("text", "json")
_INTERVAL = re.compile(r"[0-9]+(\.[0-9]+)?\Z")
_RESERVE_NAME = re.compile(r"[A-Za-z0-9][-A-Za-z0-9_./]*\Z")
# systemd.exec(5) sandboxing the agent needs none of (it reads files and talks HTTPS to the API server).
SANDBOX = (
    ("NoNewPrivileges", "yes"),
    ("CapabilityBoundingSet", ""),
    ("ProtectSystem", "strict"),
    ("ProtectHome", "yes"),
    ("PrivateTmp", "yes"),
    ("PrivateDevices", "yes"),
    ("ProtectKernelTunables", "yes"),
    ("ProtectKernelModules", "yes"),
    ("ProtectControlGroups", "yes"),
    ("RestrictAddressFamilies", "AF_UNIX AF_INET AF_INET6"),
    ("RestrictNamespaces", "yes"),
    ("LockPersonality", "yes"),
    ("RestrictRealtime", "yes"),
    ("SystemCallArchitectures", "native"),
)


class KeyAgentUnitError(TeeError):
    """Options the unit cannot be written from."""


def _reserve(reserve) -> list:
    if not reserve:
        return []
    if not isinstance(reserve, dict):
        raise KeyAgentUnitError("must be a mapping of resource to a key count, got %r" % (reserve,), option="reserve")
    args = []
    for name, count in sorted(reserve.items()):
        if not isinstance(name, str) or not _RESERVE_NAME.match(name):
            raise KeyAgentUnitError("key %r is not a resource name such as tdx or sev_es" % (name,), option="reserve")
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise KeyAgentUnitError("%s must be a whole number of keys >= 0, got %r" % (name, count), option="reserve")
        args += ["--reserve", "%s=%d" % (name, count)]
    return args


def agent_argv(options: dict) -> list:
    """The agent's command line (python first) from the role's options, each checked."""
    python = options.get("python") or "/usr/bin/python3"
    node = options.get("node")
    if not isinstance(node, str) or not node:
        raise KeyAgentUnitError("the node name is empty: set tee_key_agent_node_name", option="node")
    interval = str(options.get("interval", "0.5"))
    if not _INTERVAL.match(interval) or float(interval) <= 0:
        raise KeyAgentUnitError("%r is not a positive number of seconds" % (interval,), option="interval")
    log_format = options.get("log_format", "text")
    if log_format not in LOG_FORMATS:
        raise KeyAgentUnitError("must be text or json, got %r" % (log_format,), option="log_format")
    argv = [python, "-m", CLI_MODULE, "--node", node, "--host-root", "/", "--interval", interval]
    argv += ["--log-format", log_format]
    if options.get("kubeconfig"):
        argv += ["--kubeconfig", options["kubeconfig"]]
    argv += _reserve(options.get("reserve"))
    if options.get("dry_run"):
        argv.append("--dry-run")
    return argv


def unit_text(options: dict) -> str:
    """The unit file: ``options`` are python, prefix, node, kubeconfig, interval, reserve, log_format, dry_run."""
    prefix = options.get("prefix") or "/usr/local/lib/confidential-tee/agent"
    argv = agent_argv(options)
    unit = [
        ("Description", "confidential.tee key agent: the node's TEE key pool as the kernel has it"),
        ("After", "network-online.target"),
        ("Wants", "network-online.target"),
    ]
    service = [
        ("Type", "simple"),
        ("Environment", systemd.environment("PYTHONPATH", systemd.path(prefix, "prefix"), "prefix")),
        (None, "Output goes to the journal unbuffered, as the agent decides."),
        ("Environment", "PYTHONUNBUFFERED=1"),
        ("ExecStart", systemd.exec_args(argv, "options")),
        (None, "Killed or crashed, it is back within seconds; until then the pool stays as it last wrote it."),
        ("Restart", "always"),
        ("RestartSec", "5s"),
        *SANDBOX,
    ]
    header = "Managed by confidential.tee.tee_key_agent; changes are overwritten."
    return "\n".join(
        [
            systemd.comment(header),
            systemd.section("Unit", unit),
            systemd.section("Service", service),
            systemd.section("Install", [("WantedBy", "multi-user.target")]),
        ]
    )
