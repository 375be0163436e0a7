#!/usr/bin/python
# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: tdx_attestation_check
short_description: Check the TDX attestation chain on a host link by link (QGS, socket, vsock, QCNL, PCCS, registration)
version_added: 0.1.0
author:
  - confidential.tee maintainers (@confidential-tee)
description:
  - Every link gets C(PASS), C(FAIL) or C(SKIP) with a message and, for a failure, the fix.
  - C(qgs_transport) - which listener (Unix socket, vsock) serves which consumer, from O(transport) and
    O(kata_version); an explicit transport a consumer of a known version cannot use fails.
  - C(dcap_version) - the DCAP release (given, or the installed C(tdx-qgs) package), and that it can serve the
    transport at all (DCAP 1.12/1.13 ship no QGS, 1.14 listens on vsock only).
  - C(qgs_config) - C(/etc/qgs.conf) read as QGS of that release reads it selects the transport the consumers need.
  - C(qgs_unit) - C(qgsd.service) merged as systemd merges its drop-ins (Intel's C(socket.conf) of DCAP 1.26+,
    ours, any later one) keeps a umask under which the QCNL cache is usable, and a socket directory that exists and
    is searchable.
  - C(qgs_socket) - the Unix socket exists and accepts connections (not a stale file).
  - C(socket_access:<client>) - each consumer's QEMU identity (KubeVirt uid 107; Kata root) can C(connect()) -
    search permission on every directory, write permission on the socket, POSIX ACLs included - confirmed by a
    real C(connect()) from a child process running as that identity when the module runs as root.
  - C(vsock_loopback), C(qgs_vsock) - for vsock, the loopback transport Kata's QEMU needs and a real vsock connect.
  - C(qcnl_cache) - QGS's collateral cache directory is usable (DCAP 1.26's C(UMask=0117) breaks it).
  - C(qcnl_config) - the QCNL file parses as QCNL parses it (comments allowed, wrong types ignored).
  - C(pccs_tls) - the certificate the PCCS serves, verified against the host's CA bundle, versus C(use_secure_cert).
  - C(pccs_reachable) - a real HTTPS request to C(pccs_url) made with QCNL's TLS settings.
  - C(pccs_config), C(pccs_tokens) - for a PCCS on this host, its effective configuration (no C(hosts) that means
    every interface, no file node-config merges after C(production.json), a TLS key the C(pccs) user of the host's
    own C(/etc/passwd) can read) and that the token hashes are the SHA-512 of the tokens given.
  - C(registration) - the MPA's C(SgxRegistrationStatus) UEFI variable, or the PCK ID retrieval marker.
  - Reads only; never changes the host.
extends_documentation_fragment:
  - confidential.tee.host_root
  - confidential.tee.attestation
  - ansible.builtin.action_common_attributes
options:
  expect_pccs_url:
    description: The PCCS URL QCNL must use.
    type: str
  pccs_local:
    description: A PCCS runs on this host (check its configuration and tokens).
    type: bool
    default: false
  pccs_dir:
    description: PCCS installation directory.
    type: path
    default: /opt/intel/sgx-dcap-pccs
  user_token:
    description: PCCS user token to compare with C(UserTokenHash).
    type: str
  admin_token:
    description: PCCS admin token to compare with C(AdminTokenHash).
    type: str
  ca_bundle:
    description: CA bundle QCNL's libcurl trusts, relative to O(host_root); default the distribution's.
    type: path
  registration:
    description: C(mpa) or C(pck_retrieval) require a known registration; C(auto) reports it when known; C(none) skips.
    type: str
    choices: [auto, mpa, pck_retrieval, none]
    default: auto
  probe:
    description: Make real connections (socket as each client, vsock). Off, only the permission model decides.
    type: bool
    default: true
  timeout:
    description: Seconds for each network request.
    type: float
    default: 10
  fail_on_fail:
    description: Fail the task when any link fails (the results are returned either way).
    type: bool
    default: true
attributes:
  check_mode:
    support: full
    description: Reads only; runs the same in check mode.
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
# example: needs-hardware: a TDX host with Intel's QGS and a PCCS (the chain it checks)
- name: Check the chain for KubeVirt and Kata sharing one socket
  confidential.tee.tdx_attestation_check:
    transport: unix
    consumers: [kubevirt, kata]
    expect_pccs_url: https://pccs.example.com:8081/sgx/certification/v4/

# example: needs-hardware: a TDX host with Intel's QGS and a PCCS (the chain it checks)
- name: Check a host that runs its own PCCS, comparing token hashes
  confidential.tee.tdx_attestation_check:
    pccs_local: true
    user_token: "{{ vault_pccs_user_token }}"
    admin_token: "{{ vault_pccs_admin_token }}"
  register: chain
  no_log: true
"""

RETURN = r"""
checks:
  description:
    - One check record per link, in chain order, as every module of this collection returns a check
      (docs/modules.md, result vocabulary) - C(name) (the link), C(status) (C(PASS), C(FAIL) or C(SKIP)), C(ok)
      (not C(FAIL)), C(message), C(fix) - plus C(details).
    - C(link) repeats C(name); deprecated, removed in release 0.3.0.
  returned: always
  type: list
  elements: dict
  sample:
    - name: qgs_config
      status: PASS
      ok: true
      message: /etc/qgs.conf selects Unix socket /var/run/tdx-qgs/qgs.socket on DCAP 1.26
      fix: null
      details: {}
      link: qgs_config
summary:
  description: Counts of PASS, FAIL and SKIP, and C(ok) (no FAIL).
  returned: always
  type: dict
  sample: {"pass": 9, "fail": 1, "skip": 2, "ok": false}
report:
  description: The checks as lines (C(PASS link - message), then C(fix -) for failures), for printing.
  returned: always
  type: list
  elements: str
ok:
  description:
    - No link fails. With RV(verdict), RV(msg) and RV(remediation), the result is the form
      M(confidential.tee.tee_host_info) takes as its C(attestation) input for its preflight verdict.
  returned: always
  type: bool
verdict:
  description: C(PASS) or C(FAIL).
  returned: always
  type: str
msg:
  description: The counts, or every failing link with its message.
  returned: always
  type: str
remediation:
  description: The fix of every failing link; null when none fails.
  returned: always
  type: str
"""


from ansible.module_utils.basic import AnsibleModule
from ansible_collections.confidential.tee.plugins.module_utils.attestation.attestation_args import chain_arguments
from ansible_collections.confidential.tee.plugins.module_utils.attestation.attestation_check import (
    ChainRequest,
    check_chain,
    report_lines,
    summarize,
)
from ansible_collections.confidential.tee.plugins.module_utils.common.errors import refused_option
from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import open_host
from ansible_collections.confidential.tee.plugins.module_utils.common.validation import (
    display_text,
    list_of_strings_problem,
)

_CLIENT_KEYS = {"name", "uid", "gid", "groups"}


def _client_problem(clients):
    for index, client in enumerate(clients):
        missing = _CLIENT_KEYS - set(client)
        if missing:
            return f"extra_clients[{index}] lacks {', '.join(sorted(missing))} (give name, uid, gid and groups)"
        numbers = [client["uid"], client["gid"], *(client["groups"] or [])]
        if not all(isinstance(n, int) and not isinstance(n, bool) and 0 <= n < 2**32 for n in numbers):
            return f"extra_clients[{index}]: uid, gid and groups must be integers 0..4294967295"
    return None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            chain_arguments(),
            expect_pccs_url=dict(type="str"),
            pccs_local=dict(type="bool", default=False),
            pccs_dir=dict(type="path", default="/opt/intel/sgx-dcap-pccs"),
            user_token=dict(type="str", no_log=True),
            admin_token=dict(type="str", no_log=True),
            ca_bundle=dict(type="path"),
            registration=dict(type="str", default="auto", choices=["auto", "mpa", "pck_retrieval", "none"]),
            probe=dict(type="bool", default=True),
            timeout=dict(type="float", default=10.0),
            fail_on_fail=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    params = module.params
    problem = list_of_strings_problem("consumers", params["consumers"])
    unknown = [name for name in params["consumers"] or [] if name not in ("kubevirt", "kata")]
    if not problem and unknown:
        problem = f"consumers may hold kubevirt and kata only, got {', '.join(map(repr, unknown))}"
    if problem:
        module.fail_json(msg=problem, **refused_option("consumers"))
    problem = _client_problem(params["extra_clients"])
    if problem:
        module.fail_json(msg=problem, **refused_option("extra_clients"))
    host = open_host(module)
    if not 0 < params["timeout"] <= 300:
        module.fail_json(
            msg=f"timeout must be between 0 and 300 seconds, got {params['timeout']}", **refused_option("timeout")
        )
    request = ChainRequest(
        **{key: params[key] for key in ChainRequest.__dataclass_fields__ if key in params and params[key] is not None}
    )
    results = check_chain(request, host)
    summary = summarize(results)
    failing = [item for item in results if item["status"] == "FAIL"]
    counts = f"{summary['pass']} PASS, {summary['fail']} FAIL, {summary['skip']} SKIP"
    outcome = dict(
        changed=False,
        checks=results,
        summary=summary,
        report=[display_text(line) for line in report_lines(results)],
        # The shape tee_host_info's preflight takes as its attestation input: ok, verdict, msg, remediation.
        ok=summary["ok"],
        verdict="PASS" if summary["ok"] else "FAIL",
        msg=display_text(
            f"{len(failing)} link(s) of the attestation chain fail ({counts}): "
            + "; ".join(f"{item['name']}: {item['message']}" for item in failing)
            if failing
            else f"attestation chain: {counts}"
        ),
        remediation=display_text("; ".join(f"{item['name']}: {item['fix']}" for item in failing)) or None,
    )
    if params["fail_on_fail"] and failing:
        module.fail_json(**outcome)
    module.exit_json(**outcome)


if __name__ == "__main__":
    main()
