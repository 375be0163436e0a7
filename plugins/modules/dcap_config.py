#!/usr/bin/python
# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: dcap_config
short_description: Write Intel DCAP configuration (QGS, QCNL, PCCS, MPA) meaning what was asked on that release
version_added: 0.1.0
author:
  - confidential.tee maintainers (@confidential-tee)
description:
  - Writes one component's configuration and reads it back the way that component reads it.
  - C(qgs) edits C(/etc/qgs.conf) in place for the DCAP release on the host (C(port) changed meaning in DCAP 1.24);
    only C(port) and, when O(number_threads) is given, C(number_threads) change, so comments, unknown keys and the
    package's C(number_threads) stay. A release that cannot serve O(transport) (DCAP 1.12/1.13 have no QGS, 1.14
    no Unix socket) is refused. It also writes a systemd drop-in for C(qgsd.service) (socket directory,
    C(UMask=0077), socket group and mode for the consumers) and, for O(transport=both), a second unit
    C(qgsd-vsock.service). The drop-in is refused when C(qgsd.service), merged as systemd merges drop-ins (Intel's
    C(socket.conf) of DCAP 1.26+ included), would not keep what it sets.
  - C(qcnl) edits C(/etc/sgx_default_qcnl.conf), JSON with comments, keeping every comment and unmanaged key.
  - C(pccs) writes C(config/production.json) of the PCCS (never C(default.json)), with the SHA-512 of the user and
    admin tokens computed here; mode 0600, owner C(pccs).
  - C(mpa) edits C(/etc/mpa_registration.conf), mode 0600 because it may hold the subscription key.
  - Secrets (O(secrets)) never appear in results or diffs; token hashes and keys are shown as C(<redacted>).
  - Files are backed up, written atomically and through symbolic links, with the owner, group and mode given.
extends_documentation_fragment:
  - confidential.tee.host_root
  - confidential.tee.attestation
  - ansible.builtin.action_common_attributes
options:
  component:
    description: Which configuration to write.
    type: str
    required: true
    choices: [qgs, qcnl, pccs, mpa]
  number_threads:
    description: QGS worker threads (1..255); omitted from the file when not set.
    type: int
  qgs_dir:
    description: Directory of the QGS binary (C(qgs)).
    type: path
    default: /opt/intel/tdx-qgs
  pccs_dir:
    description: PCCS installation directory (C(config/), C(ssl_key/)).
    type: path
    default: /opt/intel/sgx-dcap-pccs
  settings:
    description:
      - Non-secret settings. QCNL keys (C(pccs_url), C(use_secure_cert), ...; C(null) removes a key), PCCS keys
        (C(HTTPS_PORT), C(hosts), C(uri), C(CachingFillMode), C(DB_CONFIG), C(mysql), ...), or MPA keys
        (C(proxy_type), C(proxy_url), C(uefi_path), C(log_level)).
    type: dict
    default: {}
  secrets:
    description:
      - PCCS C(api_key), C(user_token), C(admin_token), C(db_password); MPA C(subscription_key). Never returned.
    type: dict
    default: {}
  owner:
    description: Owner of the PCCS configuration (default C(pccs)).
    type: str
  group:
    description: Group of the PCCS configuration (default C(pccs)).
    type: str
  validate:
    description: Refuse a PCCS configuration that PCCS would reject or that breaks its clients.
    type: bool
    default: true
  on_invalid:
    description: What to do with an existing file that does not parse. C(replace) writes a new one after a backup.
    type: str
    choices: [fail, replace]
    default: fail
  backup:
    description: Copy each file to C(<file>.<timestamp>~) before changing it.
    type: bool
    default: true
attributes:
  check_mode:
    support: full
    description: Reports every file that would change, and why, without writing.
  diff_mode:
    support: full
    description: Shows each file before and after, secrets redacted.
  platform:
    platforms: posix
"""

EXAMPLES = r"""
# example: needs-hardware: needs Intel's DCAP packages (tdx-qgs, sgx-dcap-pccs) installed on a TDX host
- name: QGS for KubeVirt and Kata on one host, on whatever DCAP release is installed
  confidential.tee.dcap_config:
    component: qgs
    transport: both
    consumers: [kubevirt, kata]

# example: needs-hardware: needs Intel's DCAP packages (tdx-qgs, sgx-dcap-pccs) installed on a TDX host
- name: Point QCNL at the site PCCS
  confidential.tee.dcap_config:
    component: qcnl
    settings:
      pccs_url: https://pccs.example.com:8081/sgx/certification/v4/
      use_secure_cert: true

# example: needs-hardware: needs Intel's DCAP packages (tdx-qgs, sgx-dcap-pccs) installed on a TDX host
- name: PCCS production.json with hashed tokens
  confidential.tee.dcap_config:
    component: pccs
    settings:
      hosts: 0.0.0.0
      CachingFillMode: LAZY
    secrets:
      api_key: "{{ vault_pcs_api_key }}"
      user_token: "{{ vault_pccs_user_token }}"
      admin_token: "{{ vault_pccs_admin_token }}"
  no_log: true
"""

RETURN = r"""
changes:
  description:
    - What changed, in the shape every module of this collection returns (docs/modules.md, result vocabulary).
    - C(written) and C(removed) (full paths, including O(host_root); in check mode what would be), C(hidden) (0
      here), C(commands) (empty here), C(backups) (backup copies made, full paths) and C(entries) (each file with
      C(name), C(changed) and C(reasons) such as C(create), C(content), C(mode ...), C(remove)).
  returned: always
  type: dict
  sample: {"written": ["/etc/qgs.conf"], "removed": [], "hidden": 0, "commands": [],
           "backups": ["/etc/qgs.conf.2026-11-22@12-00-00~"],
           "entries": [{"name": "/etc/qgs.conf", "changed": true, "reasons": ["content"]}]}
files:
  description:
    - Deprecated, removed in release 0.3.0; read C(changes.entries) (C(name) instead of C(path)).
    - Each file considered, whether it changed and why.
  returned: always
  type: list
  elements: dict
  sample: [{"path": "/etc/qgs.conf", "changed": true, "reasons": ["content"]}]
restart:
  description: systemd units whose files changed (C(daemon-reload) when unit files changed).
  returned: always
  type: list
  elements: str
  sample: [daemon-reload, qgsd.service]
effective:
  description: What the component will read from the written file (secrets redacted).
  returned: always
  type: dict
  sample: {"transport": "unix", "port": null, "threads": 0}
qgs:
  description:
    - For O(component=qgs), the DCAP release, the transport (O(transport=auto) resolved), the listeners with the
      consumers each serves, socket group and clients planned, and C(unit), C(qgsd.service) as systemd will merge
      it with the drop-in written (C(verified) false, with the reason, while the package is not installed).
  returned: when O(component=qgs)
  type: dict
  sample: {"dcap_version": "1.26", "era": "1.26+", "transport": "both", "socket_group": "107", "socket_mode": "0660",
           "listeners": [{"unit": "qgsd.service", "transport": "unix", "path": "/var/run/tdx-qgs/qgs.socket",
                          "serves": ["kubevirt"]},
                         {"unit": "qgsd-vsock.service", "transport": "vsock", "port": 4050, "serves": ["kata"]}],
           "unit": {"verified": true, "umask": "0077", "runtime_directory_mode": "0755"}}
backups:
  description: Deprecated, removed in release 0.3.0; read C(changes.backups). Backup copies made (full paths).
  returned: always
  type: list
  elements: str
  sample: [/etc/qgs.conf.2026-11-22@12:00:00~]
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.confidential.tee.plugins.module_utils.attestation.attestation_args import chain_arguments
from ansible_collections.confidential.tee.plugins.module_utils.attestation.dcap_files import (
    PLANNERS,
    record,
    units_to_restart,
)
from ansible_collections.confidential.tee.plugins.module_utils.common.changes import Changes
from ansible_collections.confidential.tee.plugins.module_utils.common.errors import TeeError, refused_option
from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import open_host
from ansible_collections.confidential.tee.plugins.module_utils.common.results import file_changes_result
from ansible_collections.confidential.tee.plugins.module_utils.common.validation import (
    display_text,
    list_of_strings_problem,
)


def argument_spec():
    return dict(
        chain_arguments(),
        component=dict(type="str", required=True, choices=list(PLANNERS)),
        number_threads=dict(type="int"),
        qgs_dir=dict(type="path", default="/opt/intel/tdx-qgs"),
        pccs_dir=dict(type="path", default="/opt/intel/sgx-dcap-pccs"),
        settings=dict(type="dict", default={}),
        secrets=dict(type="dict", default={}, no_log=True),
        owner=dict(type="str"),
        group=dict(type="str"),
        validate=dict(type="bool", default=True),
        on_invalid=dict(type="str", default="fail", choices=["fail", "replace"]),
        backup=dict(type="bool", default=True),
    )


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    params = module.params
    problem = list_of_strings_problem("consumers", params["consumers"])
    if problem:
        module.fail_json(msg=problem, **refused_option("consumers"))
    reader = open_host(module)
    changes = Changes(
        reader,
        module.check_mode,
        backup=params["backup"],
        secrets=[str(value) for value in params["secrets"].values() if value is not None],
    )
    try:
        plan = PLANNERS[params["component"]](reader, params)
        record(changes, plan)
        changes.apply()
    except (TeeError, OSError) as exc:
        message = (
            str(exc) if isinstance(exc, TeeError) else f"writing the {params['component']} configuration failed: {exc}"
        )
        module.fail_json(
            msg=changes.redact(display_text(message)),
            **file_changes_result(changes),
            **refused_option(getattr(exc, "option", None)),
        )
    result = dict(
        changed=changes.changed,
        restart=units_to_restart(plan),
        effective=plan.effective,
        **file_changes_result(changes),
    )
    if params["component"] == "qgs":
        result["qgs"] = plan.info
    if module._diff:
        result["diff"] = changes.diff()
    for warning in plan.warnings:
        module.warn(changes.redact(display_text(warning)))
    module.exit_json(**changes.redact(result))


if __name__ == "__main__":
    main()
