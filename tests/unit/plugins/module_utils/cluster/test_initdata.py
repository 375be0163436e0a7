"""initdata: the document, its annotation, digest, TDX/SNP register values and PCR 8.

Golden values are computed here independently of module_utils: coreutils' sha*sum over the written TOML,
gzip's own decompressor for the annotation, and PCR 8 the way the OpenShift documentation does it
(concatenate 64 hex zeros and the hex digest, decode, SHA-256).
"""

from __future__ import annotations

import base64
import hashlib
import shutil
import subprocess
import tomllib
import zlib

import pytest
from ansible_collections.confidential.tee.plugins.module_utils.cluster import initdata

CERT = "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUQ\n-----END CERTIFICATE-----\n"
SPEC = {
    "kbs_url": "https://kbs.example.com:8080",
    "kbs_cert": CERT,
    "image_security_policy_uri": "kbs:///default/security-policy/test",
}


@pytest.fixture
def built():
    return initdata.build(dict(SPEC))


def _coreutils_digest(tmp_path, text, algorithm):
    tool = shutil.which(f"{algorithm}sum")
    if tool is None:
        pytest.skip(f"{algorithm}sum (coreutils) is not installed")
    path = tmp_path / "initdata.toml"
    path.write_bytes(text.encode())
    return subprocess.run([tool, str(path)], check=True, capture_output=True, text=True).stdout.split()[0]


@pytest.mark.parametrize("algorithm", ["sha256", "sha384", "sha512"])
def test_digest_matches_coreutils(tmp_path, algorithm):
    result = initdata.build(dict(SPEC, algorithm=algorithm))
    assert result["digest"] == _coreutils_digest(tmp_path, result["toml"], algorithm)
    assert base64.b64decode(result["digest_base64"]).hex() == result["digest"]


def test_pcr8_as_openshift_documents_it(tmp_path, built):
    digest_hex = _coreutils_digest(tmp_path, built["toml"], "sha256")
    expected = hashlib.sha256(bytes.fromhex("0" * 64 + digest_hex)).hexdigest()
    assert built["pcr8"] == expected
    assert built["pcr8_reason"] is None


def test_pcr8_is_null_with_a_reason_for_longer_digests():
    result = initdata.build(dict(SPEC, algorithm="sha384"))
    assert result["pcr8"] is None
    assert "32-byte digest" in result["pcr8_reason"]


def test_register_values_pad_or_truncate_the_digest(built):
    sha512 = initdata.build(dict(SPEC, algorithm="sha512"))
    assert built["tdx_mrconfigid"] == built["digest"] + "00" * 16  # 32-byte digest padded to 48
    assert built["snp_hostdata"] == built["digest"]
    assert sha512["tdx_mrconfigid"] == sha512["digest"][:96]
    assert sha512["snp_hostdata"] == sha512["digest"][:64]


def test_annotation_is_gzip_base64_of_the_document_and_deterministic(tmp_path, built):
    raw = base64.b64decode(built["annotation"])
    assert raw[4:8] == b"\0\0\0\0"  # gzip MTIME field is zero: same input, same bytes, same digest
    gzip_tool = shutil.which("gzip")
    if gzip_tool:
        decoded = subprocess.run([gzip_tool, "-dc"], input=raw, check=True, capture_output=True).stdout.decode()
    else:
        import gzip

        decoded = gzip.decompress(raw).decode()
    assert decoded == built["toml"]
    assert initdata.build(dict(SPEC))["annotation"] == built["annotation"]
    assert built["annotation_name"] == "io.katacontainers.config.hypervisor.cc_init_data"


def test_document_shape_the_kata_agent_reads(built):
    document = tomllib.loads(built["toml"])
    assert document["version"] == "0.1.0" and document["algorithm"] == "sha256"
    assert set(document["data"]) == {"aa.toml", "cdh.toml", "policy.rego"}
    aa = tomllib.loads(document["data"]["aa.toml"])
    cdh = tomllib.loads(document["data"]["cdh.toml"])
    assert aa["token_configs"]["kbs"] == {"url": SPEC["kbs_url"], "cert": CERT}
    assert aa["token_configs"]["coco_as"]["url"] == SPEC["kbs_url"]
    assert cdh["kbc"] == {"name": "cc_kbc", "url": SPEC["kbs_url"], "kbs_cert": CERT}
    assert cdh["image"]["image_security_policy_uri"] == SPEC["image_security_policy_uri"]
    assert document["data"]["policy.rego"] == built["policy_rego"]


def test_restrictive_default_policy(built):
    rules = dict(line.split(" := ") for line in built["policy_rego"].splitlines() if line.startswith("default "))
    denied = {name[len("default ") :] for name, value in rules.items() if value == "false"}
    assert denied == set(initdata.DENIED_BY_DEFAULT)
    assert len(rules) == len(initdata.AGENT_REQUESTS)
    assert built["warnings"] == []


def test_permissive_and_insecure_choices_warn():
    result = initdata.build({"kbs_url": "http://kbs:8080", "policy_allow": ["ExecProcessRequest"]})
    text = " ".join(result["warnings"])
    assert "plain HTTP" in text
    assert "allows ExecProcessRequest" in text
    assert "image signatures" in text
    assert "default ExecProcessRequest := true" in result["policy_rego"]


def test_no_kbs_warns_and_leaves_the_guest_components_unconfigured():
    result = initdata.build({})
    assert set(tomllib.loads(result["toml"])["data"]) == {"policy.rego"}
    assert any("no kbs_url" in w for w in result["warnings"])


def test_raw_policy_is_scanned():
    rego = "package agent_policy\ndefault ReadStreamRequest := true\n"
    result = initdata.build({"kbs_url": "https://k", "policy_rego": rego, "image_security_policy_uri": "kbs:///x"})
    assert result["policy_rego"] == rego
    assert any("allows ReadStreamRequest" in w for w in result["warnings"])


def test_extra_settings_merge_into_the_generated_configs():
    result = initdata.build(dict(SPEC, cdh={"image": {"max_concurrent_layer_downloads_per_image": 3}}))
    cdh = tomllib.loads(tomllib.loads(result["toml"])["data"]["cdh.toml"])
    assert cdh["image"] == {
        "image_security_policy_uri": SPEC["image_security_policy_uri"],
        "max_concurrent_layer_downloads_per_image": 3,
    }


@pytest.mark.parametrize(
    "spec, message",
    [
        ({"policy_deny": ["ExecProcesRequest"]}, "did you mean ExecProcessRequest"),
        ({"policy_allow": "ExecProcessRequest"}, "must be a list"),
        ({"policy_allow": ["ExecProcessRequest"], "policy_deny": ["ExecProcessRequest"]}, "both allowed and denied"),
        ({"algorithm": "md5"}, "not supported"),
        ({"kbs_url": "kbs.example.com"}, "is not a URL"),
        ({"kbs_url": "https://k", "kbs_cert": "not a pem"}, "PEM certificate"),
        ({"cdh": {"kbc": {}}}, "need kbs_url"),
        ({"extra_data": {"policy.rego": "x"}}, "generated from the other options"),
        ({"extra_data": {"k": 1}}, "must be a string"),
        ({"kbs_url": "https://k", "aa": {"x": None}}, "null"),
    ],
)
def test_bad_input_names_the_field(spec, message):
    with pytest.raises(initdata.InitdataError, match=message):
        initdata.build(spec)


# A vector written by hand (not by this collection's TOML emitter), its digests computed once with coreutils
# (sha256sum, sha384sum) and frozen here. kata-containers src/libs/kata-types/src/initdata.rs (read at 014ab2f):
# calculate_digest hashes the TOML text as given, adjust_digest truncates or zero-pads to 48 bytes (TDX) or
# 32 bytes (SNP), and the annotation is STANDARD base64 of a gzip stream (flate2 GzDecoder).
VECTOR = (
    'algorithm = "sha256"\nversion = "0.1.0"\n\n[data]\n"policy.rego" = """\npackage agent_policy\n'
    'default AllowRequestsFailingPolicy := false\n"""\n'
)
VECTOR_SHA256 = "d4485a03ce86e902894d23f622bc159d80744023cd42f1d65b341f76d5937305"
VECTOR_SHA384 = "88dbbd1d766987d253399973915ec1195378b60e7f81b554fd50c80e4348994394a4d4ddf447c221a011ff65dc78dbfa"


def test_an_independent_vector_gives_upstreams_register_values():
    raw = initdata.digest(VECTOR, "sha256")
    assert raw.hex() == VECTOR_SHA256
    assert initdata.fit(raw, initdata.TDX_MRCONFIGID_BYTES).hex() == VECTOR_SHA256 + "00" * 16
    assert initdata.fit(initdata.digest(VECTOR, "sha384"), initdata.SNP_HOSTDATA_BYTES).hex() == VECTOR_SHA384[:64]


def test_the_annotation_decodes_the_way_the_kata_runtime_decodes_it(built):
    packed = base64.b64decode(built["annotation"], validate=True)  # STANDARD alphabet, padded
    text = zlib.decompress(packed, wbits=31).decode("utf-8")  # a gzip container, read without the gzip module
    assert text == built["toml"]
    parsed = tomllib.loads(text)  # parse_initdata: version 0.1.0, a supported algorithm, string values only
    assert set(parsed) == {"version", "algorithm", "data"} and parsed["version"] == "0.1.0"
    assert parsed["algorithm"] in ("sha256", "sha384", "sha512")
    assert all(isinstance(value, str) for value in parsed["data"].values())
    assert built["annotation_name"] == "io.katacontainers.config.hypervisor.cc_init_data"
    assert built["digest"] == hashlib.sha256(text.encode()).hexdigest()
