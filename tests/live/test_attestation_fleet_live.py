"""The attestation playbook's cluster form and the fleet report's API source, against a real API server."""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path

import pytest
import yaml
from teesim.fixtures.fleet import build_fleet

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
SECRETS = {
    "tdx_attestation_pccs_api_key": "c0ffee11c0ffee11c0ffee11c0ffee11",
    "tdx_attestation_pccs_user_token": "live-user-Token-58",
    "tdx_attestation_pccs_admin_token": "live-admin-Token-93",
}


def _apply_attestation(live, ansible_playbook_cli, tmp_path):
    """The attestation playbook's cluster form applied to ``live`` at -vvv --diff, with a PCCS and its secrets."""
    variables = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "tee_attestation_hosts": "localhost",
        "tee_output": "apply",
        "tee_kubeconfig": str(live.kubeconfig),
        "tee_manifest_dir": str(tmp_path / "attestation"),
        "tdx_attestation_dcap_version": "1.26",
        "tdx_attestation_pccs_enabled": True,
        "tdx_attestation_registration": "pck_retrieval",
        **SECRETS,
    }
    (tmp_path / "vars.yml").write_text(yaml.safe_dump(variables))
    return ansible_playbook_cli(
        REPO / "playbooks" / "attestation.yml",
        "-i",
        "localhost,",
        "-e",
        f"@{tmp_path / 'vars.yml'}",
        "-vvv",
        "--diff",
        env={"KUBECONFIG": "/nonexistent"},
        timeout=600,
    )


def test_attestation_cluster_form_applies_and_never_shows_a_secret(live, ansible_playbook_cli, tmp_path):
    live.require_private("creates the tdx-attestation namespace and its workloads")
    run = _apply_attestation(live, ansible_playbook_cli, tmp_path)
    assert run.returncode == 0, run.stdout[-4000:]
    secrets = (live.get("secrets", namespace="tdx-attestation") or {"items": []})["items"]
    assert len(secrets) >= 2, [s["metadata"]["name"] for s in secrets]
    shown = run.stdout + run.stderr
    for secret in secrets:
        for key, value in (secret.get("data") or {}).items():
            if secret.get("type") == "kubernetes.io/tls" and key == "tls.crt":
                # The PCCS's certificate is public (it presents it to every client); -vvv --diff shows its fields
                # when community.crypto signs it. Its private key (tls.key) is checked like every other value.
                continue
            decoded = base64.b64decode(value).decode(errors="replace")
            assert value not in shown, f"{secret['metadata']['name']}: its data is in the -vvv --diff output"
            for line in filter(None, (part.strip() for part in decoded.splitlines())):
                if len(line) >= 12:  # a PEM line, a token, a JSON line with a secret value
                    assert line not in shown, f"{secret['metadata']['name']}: {line[:8]}... is in the output"
    assert not [v for v in SECRETS.values() if v in shown]
    assert live.get("daemonsets", "qgs", namespace="tdx-attestation") is not None
    # Which Secret changed is still said, by name.
    assert "Secret/tdx-attestation/pccs-config: changed" in run.flat, run.stdout[-4000:]


def test_a_refused_secret_is_named_and_the_answer_quoting_it_never_shown(live, ansible_playbook_cli, tmp_path):
    """An admission policy refuses pccs-config with a message that quotes its production.json (the PCS API key)."""
    live.require_private("creates the tdx-attestation namespace and an admission policy")
    live.deny(
        "no-pccs-config",
        {"apiGroups": [""], "resources": ["secrets"]},
        {
            "expression": "object.metadata.name != 'pccs-config'",
            "messageExpression": "'refused: ' + string(object.data['production.json'])",
        },
    )
    probe = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "pccs-config", "namespace": "default"},
        "data": {"production.json": base64.b64encode(b"probe").decode()},
    }
    # The server's answer does quote the data (as it is stored: base64).
    assert "refused: " + probe["data"]["production.json"] in live.wait_until_refused(probe)
    # Created, not updated, whichever test ran before in this cluster.
    live.kubectl("delete", "secret", "pccs-config", "-n", "tdx-attestation", "--ignore-not-found", "--wait=true")
    run = _apply_attestation(live, ansible_playbook_cli, tmp_path)
    assert run.returncode != 0
    assert "Secret/tdx-attestation/pccs-config: failed" in run.flat, run.stdout[-4000:]
    shown = run.stdout + run.stderr
    assert "refused: " not in shown
    assert not [v for v in SECRETS.values() if v in shown]
    assert "Traceback" not in shown


def test_fleet_report_from_the_api_equals_the_file_form(live, ansible_playbook_cli, tmp_path, optional_reference):
    live.require_private("loads a simulated fleet's Nodes and Pods")
    fleet = tmp_path / "fleet"
    build_fleet(fleet, optional_reference)
    objects = []
    for kind in ("runtimeclasses", "nodefeaturerules", "nodes", "pods"):
        objects += json.loads((fleet / "kubernetes" / f"{kind}.json").read_text())["items"]
    live.plane.load_objects(objects)
    playbook = REPO / "playbooks" / "fleet_report.yml"
    reports = {}
    for source, extra in {
        "dir": {"tee_fleet_kubernetes_dir": fleet / "kubernetes"},
        "api": {"tee_fleet_kubernetes": "api", "tee_fleet_kubeconfig": live.kubeconfig},
    }.items():
        out = tmp_path / f"report-{source}"
        run = ansible_playbook_cli(
            playbook,
            "-i",
            str(fleet / "inventory.yml"),
            extra_vars={**extra, "tee_fleet_report_dir": out},
            env={"KUBECONFIG": "/nonexistent"},
        )
        assert run.returncode == 0, run.stdout[-4000:]
        reports[source] = json.loads((out / "report.json").read_text())
    assert strip_times(reports["api"]) == strip_times(reports["dir"])
    assert reports["api"]["nodes"], "the report read no node"


def strip_times(report: dict) -> dict:
    """The report without when it was made (the only field that may differ between two runs)."""
    return {
        key: value
        for key, value in report.items()
        if key not in {"generated", "generated_at", "source", "kubernetes_source"}
    }
