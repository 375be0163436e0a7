#!/usr/bin/python
# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: kata_initdata
short_description: Build Kata confidential-containers initdata, its pod annotation, digest and attestation values
version_added: 0.1.0
description:
  - Writes the initdata TOML (C(version = "0.1.0"), C(algorithm), and a C([data]) table with C(aa.toml),
    C(cdh.toml) and C(policy.rego)) from structured input, without any third-party library.
  - Returns the value for the pod annotation C(io.katacontainers.config.hypervisor.cc_init_data)
    (base64 of gzip with a zero timestamp, so the same input always gives the same annotation), the digest
    attestation measures, the TDX C(MRCONFIGID) and SNP C(HOSTDATA) values derived from it, and PCR 8 as a
    vTPM records it (SHA-256 of 32 zero bytes followed by the digest).
  - The default agent policy is restrictive. It denies C(ExecProcessRequest), C(ReadStreamRequest),
    C(WriteStreamRequest), C(SetPolicyRequest) and C(GetDiagnosticDataRequest) and allows the rest. Allowing
    one of these, plain-HTTP KBS URLs, a missing KBS and a missing image signature policy produce module
    warnings.
  - Pure computation; nothing is written. Put the annotation in a pod template or write RV(toml) with
    M(ansible.builtin.copy).
author:
  - confidential.tee maintainers (@confidential-tee)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - confidential.tee.computes_only
options:
  algorithm:
    description:
      - Digest algorithm named in the document.
      - Only C(sha256) gives a PCR 8 value (vTPM platforms extend PCR 8 with a 32-byte digest only).
    type: str
    choices: [sha256, sha384, sha512]
    default: sha256
  kbs_url:
    description: Key Broker Service (Trustee) URL for the attestation agent and the confidential data hub.
    type: str
  kbs_cert:
    description: PEM certificate of the KBS, for HTTPS with a private CA.
    type: str
  attestation_service_url:
    description: Attestation service URL (C(token_configs.coco_as)); defaults to O(kbs_url).
    type: str
  image_security_policy_uri:
    description: KBS resource with the container image signature policy, for example C(kbs:///default/security-policy/test).
    type: str
  aa:
    description: Settings merged into C(aa.toml) over the generated ones (tables merge, other values replace).
    type: dict
  cdh:
    description: Settings merged into C(cdh.toml) over the generated ones.
    type: dict
  policy_allow:
    description: Agent requests to allow on top of the restrictive default.
    type: list
    elements: str
    default: []
  policy_deny:
    description: Agent requests to deny on top of the restrictive default.
    type: list
    elements: str
    default: []
  policy_rego:
    description:
      - A complete agent policy (for example one generated per workload by Kata's genpolicy) used instead of the
        generated one. Exclusive with O(policy_allow) and O(policy_deny).
    type: str
  extra_data:
    description: More entries for the C([data]) table (string values).
    type: dict
notes:
  - initdata protects integrity, not confidentiality; the untrusted host reads it. Put no secrets in it.
seealso:
  - name: Initdata specification (Confidential Containers trustee)
    description: The document format and how TEEs bind its digest.
    link: https://github.com/confidential-containers/trustee/blob/main/kbs/docs/initdata.md
"""

EXAMPLES = r"""
# example: skip: kbs.crt is your Trustee KBS's certificate
- name: Build initdata for a Trustee KBS
  confidential.tee.kata_initdata:
    kbs_url: https://kbs.example.com:8080
    kbs_cert: "{{ lookup('ansible.builtin.file', 'kbs.crt') }}"
    image_security_policy_uri: kbs:///default/security-policy/test
  register: initdata

# example: skip: uses the result of the task above
- name: Use it in a pod template
  ansible.builtin.set_fact:
    pod_annotations: "{{ {initdata.annotation_name: initdata.annotation} }}"

# example: skip: uses the result of the task above
- name: Record the reference values for Trustee's RVPS
  ansible.builtin.debug:
    msg: "digest {{ initdata.digest }}, PCR8 {{ initdata.pcr8 }}, MRCONFIGID {{ initdata.tdx_mrconfigid }}"
"""

RETURN = r"""
toml:
  description: The initdata document.
  returned: success
  type: str
policy_rego:
  description: The agent policy inside it.
  returned: success
  type: str
annotation_name:
  description: The pod annotation key.
  returned: success
  type: str
  sample: io.katacontainers.config.hypervisor.cc_init_data
annotation:
  description: base64(gzip(toml)), gzip header timestamp 0.
  returned: success
  type: str
algorithm:
  description: The digest algorithm.
  returned: success
  type: str
  sample: sha256
digest:
  description: Hex digest of the TOML text with O(algorithm).
  returned: success
  type: str
digest_base64:
  description: The same digest, standard base64 (the form Kata's runtime and the attestation agent pass around).
  returned: success
  type: str
tdx_mrconfigid:
  description: The digest zero-padded or truncated to 48 bytes, hex, as a TDX guest's MRCONFIGID reports it.
  returned: success
  type: str
snp_hostdata:
  description: The digest zero-padded or truncated to 32 bytes, hex, as an SNP guest's HOSTDATA reports it.
  returned: success
  type: str
pcr8:
  description: SHA-256 of 32 zero bytes followed by the digest, hex; V(null) unless O(algorithm) is C(sha256).
  returned: success
  type: str
pcr8_reason:
  description: Why RV(pcr8) is V(null), else V(null).
  returned: success
  type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.confidential.tee.plugins.module_utils.cluster.initdata import InitdataError, build


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "algorithm": {"type": "str", "default": "sha256", "choices": ["sha256", "sha384", "sha512"]},
            "kbs_url": {"type": "str"},
            "kbs_cert": {"type": "str"},
            "attestation_service_url": {"type": "str"},
            "image_security_policy_uri": {"type": "str"},
            "aa": {"type": "dict"},
            "cdh": {"type": "dict"},
            "policy_allow": {"type": "list", "elements": "str", "default": []},
            "policy_deny": {"type": "list", "elements": "str", "default": []},
            "policy_rego": {"type": "str"},
            "extra_data": {"type": "dict"},
        },
        mutually_exclusive=[("policy_rego", "policy_allow"), ("policy_rego", "policy_deny")],
        supports_check_mode=True,
    )
    try:
        result = build(module.params)
    except InitdataError as exc:
        module.fail_json(msg=str(exc))
    for warning in result.pop("warnings"):
        module.warn(warning)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
