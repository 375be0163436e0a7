# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""The fleet report as data: each node's preflight verdict, key pools and drift findings, and a summary.

Pure Python, standard library only. Input is what a play registered from ``tee_host_info`` with
``preflight: true`` for every host, plus the Kubernetes objects of the cluster (:mod:`drift`). The
renderers (:mod:`fleet_render` for Markdown and HTML, :mod:`prometheus` for the textfile collector) take the
returned dict and nothing else, so every format says the same thing.
"""

from __future__ import annotations

import json
import re

from ansible_collections.confidential.tee.plugins.module_utils.common.file_names import fits, hashed_name
from ansible_collections.confidential.tee.plugins.module_utils.common.validation import is_dns1123_subdomain
from ansible_collections.confidential.tee.plugins.module_utils.fleet.drift import MISC_RESOURCES, fleet_drift
from ansible_collections.confidential.tee.plugins.module_utils.host.fleet_view import fleet_view
from ansible_collections.confidential.tee.plugins.module_utils.host.preflight import TEE_SECTION

SCHEMA = "confidential.tee/fleet-report/v1"
SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}
NO_KUBERNETES = "no Kubernetes objects given (kubernetes or kubernetes_dir): drift not checked"


_STATUS_KEYS = ("failed", "unreachable", "skipped", "msg")


METRICS_SUFFIX = ".prom"


def metrics_file_name(node: str) -> str:
    """The per-node textfile name: distinct for distinct names, one valid path component for any name.

    A valid node name that fits is used as it is (``tdx-1.prom``). Any other name (too long with the suffix, not
    a DNS-1123 subdomain, non-ASCII) becomes a readable prefix, ``_`` (never in a valid node name, so never
    equal to a plain one) and 32 hex digits of the name's SHA-256: two names never collapse into one file.
    """
    if is_dns1123_subdomain(node) and fits(node + METRICS_SUFFIX):
        return node + METRICS_SUFFIX
    prefix = re.sub(r"[^a-z0-9.-]", "-", node.lower())[:64].strip(".") or "node"
    return hashed_name(prefix, node, METRICS_SUFFIX)


def _pick(mapping, keys) -> dict:
    return {key: mapping[key] for key in keys if key in mapping}


def compact_result(result):
    """Only what the report reads from a registered ``tee_host_info`` (preflight) result.

    A full result is 9 to 12 KB per host; Ansible's cost of passing data between tasks grows with its size, so the
    ``fleet_hosts`` filter hands the report module this subset instead. The host part is ``host.fleet_view``, what
    ``tee_host_info`` itself returns with ``result: fleet``; applying it twice changes nothing.
    """
    if not isinstance(result, dict):
        return result
    compact = _pick(result, _STATUS_KEYS)
    host = result.get("host")
    if isinstance(host, dict):
        compact["host"] = fleet_view(host)
    return compact


def _lookup(mapping, key):
    """``mapping[key]`` or ``None``: Ansible's HostVars has no ``get()``, hosts outside the play no variable."""
    return mapping[key] if key in mapping else None  # noqa: SIM401


def fleet_host_entries(names, hostvars, result_var, node_var="tee_node_name") -> list[dict]:
    """``[{"name", "node", "result"}]`` for ``tee_fleet_report``, one per host in ``names`` (``fleet_hosts`` filter).

    ``result`` is :func:`compact_result` of the host's ``result_var`` as JSON text (``None`` when the host never
    registered it: unreachable, limited out of the play); ``node`` is its ``node_var`` or the host name. Text,
    because Ansible templates every string of nested data passed to a module (seconds for a hundred hosts' facts)
    and one string per host costs next to nothing. Raises ``TypeError`` when ``names`` is not a list.
    """
    if isinstance(names, str) or not isinstance(names, (list, tuple)):
        raise TypeError("expects a list of host names, got %r" % (names,))
    entries = []
    for name in names:
        variables = _lookup(hostvars, name) or {}
        result = compact_result(_lookup(variables, result_var))
        text = None if result is None else json.dumps(result, sort_keys=True, default=str)
        entries.append({"name": name, "node": _lookup(variables, node_var) or name, "result": text})
    return entries


def host_facts(result) -> tuple[dict | None, str | None]:
    """``(facts, None)`` from a registered ``tee_host_info`` result, or ``(None, why not)``."""
    if not isinstance(result, dict):
        return None, "no result: the host was unreachable or the task did not run"
    if result.get("unreachable"):
        return None, "unreachable: %s" % (result.get("msg") or "no message")
    if result.get("failed"):
        return None, "tee_host_info failed: %s" % (result.get("msg") or "no message")
    if result.get("skipped"):
        return None, "tee_host_info was skipped"
    facts = result.get("host")
    if not isinstance(facts, dict) or not isinstance(facts.get("preflight"), dict):
        return None, "the result has no host.preflight: run tee_host_info with preflight: true"
    return facts, None


def node_verdict(preflight_verdict, findings) -> str:
    """The node's verdict: its preflight's, made FAIL by a critical drift finding (guests placed there fail to
    start however well the host is set up); ``UNKNOWN`` (no facts) stays."""
    if preflight_verdict != "UNKNOWN" and any(f["severity"] == "critical" for f in findings):
        return "FAIL"
    return preflight_verdict


def _cpu_tee_present(facts, preflight) -> bool:
    """Whether the host's CPU shows its vendor's TEE: the first check of that preflight section (the CPU flag)."""
    wanted = TEE_SECTION.get((facts or {}).get("tee_vendor"))
    section = next((s for s in preflight.get("sections") or [] if s.get("id") == wanted), None)
    checks = (section or {}).get("checks") or []
    return bool(checks) and checks[0].get("status", checks[0].get("verdict")) == "PASS"  # verdict: before 0.2.0


def tee_label(facts, preflight, gpu) -> str | None:
    """What the TEE column says: the CPU TEE the host is judged for (TDX on Intel, SEV-SNP on AMD) and, on a GPU
    host, the GPU's confidential computing; a GPU host whose CPU shows no TEE is not labelled with one."""
    technology = preflight.get("technology")
    if not gpu:
        return technology
    gpu_cc = "NVIDIA GPU CC" if gpu.get("cc_capable") else "NVIDIA GPU (not CC capable)"
    if technology and _cpu_tee_present(facts, preflight):
        return "%s + %s" % (technology, gpu_cc)
    return "%s; no CPU TEE" % gpu_cc


# A preflight check's names before the check record (tee_host_info before release 0.2.0): record name -> old name.
_OLD_CHECK_NAMES = {"name": "id", "status": "verdict", "message": "detail", "fix": "remediation"}


def _with_record_names(preflight: dict) -> dict:
    """``preflight`` whose checks all carry the check record's names, also when it was registered by a release
    that returned only the old ones (until 0.3.0, when those are no longer returned)."""
    sections = [
        dict(section, checks=[{**{new: c.get(old) for new, old in _OLD_CHECK_NAMES.items()}, **c} for c in checks])
        for section in preflight.get("sections") or []
        for checks in [section.get("checks") or []]
    ]
    return dict(preflight, sections=sections) if sections else preflight


def _node_entry(host, facts, error, drift) -> dict:
    preflight = _with_record_names((facts or {}).get("preflight") or {})
    kernel = (facts or {}).get("kernel") or {}
    findings = sorted(drift["findings"], key=lambda f: (SEVERITY_ORDER.get(f["severity"], 9), f["id"]))
    preflight_verdict = preflight.get("verdict") if facts else "UNKNOWN"
    gpu = _gpu_summary(facts)
    return {
        "name": host["name"],
        "node": host["node"],
        "reachable": facts is not None,
        "error": error,
        "kernel": kernel.get("release"),
        "cpu_vendor": (facts or {}).get("tee_vendor"),
        "technology": tee_label(facts, preflight, gpu),
        "preflight_verdict": preflight_verdict,
        "verdict": node_verdict(preflight_verdict, findings),
        "ready": bool(preflight.get("ready")),
        "counts": preflight.get("counts") or {},
        "blocking": preflight.get("blocking") or ([error] if error else []),
        "sections": preflight.get("sections") or [],
        "table": preflight.get("table") or [],
        "gpu": gpu,
        "in_kubernetes": drift["in_kubernetes"],
        "drift_reason": drift["reason"],
        "pools": {r: drift["pools"][r] for r in MISC_RESOURCES if _pool_has_data(drift["pools"][r])},
        "findings": findings,
        "problems": drift["problems"],
        # A host's problems (the name tee_host_info returned as "warnings" before release 0.2.0).
        "warnings": [w.get("problem") for w in _host_problems(facts or {})],
    }


def _host_problems(facts) -> list:
    return facts.get("problems", facts.get("warnings")) or []


def _gpu_summary(facts) -> dict | None:
    gpu = (facts or {}).get("gpu") or {}
    if not gpu.get("probed") or not gpu.get("present"):
        return None
    return {
        "count": len(gpu.get("gpus") or []),
        "names": sorted({g.get("name") for g in gpu.get("gpus") or [] if g.get("name")}),
        "cc_capable": gpu.get("cc_capable"),
        "cc_state": gpu.get("cc_state"),
        "ready_state": gpu.get("ready_state"),
    }


def _pool_has_data(pool) -> bool:
    return bool(pool["capacity"] or pool["in_use"] or pool["advertised"])


def _finding_key(finding) -> tuple:
    numbers = finding.get("numbers") or {}
    return finding["id"], finding.get("resource"), numbers.get("runtime_class")


def all_findings(report_nodes, fleet_findings) -> list[dict]:
    """Every finding once: node findings, and the fleet findings no reported node carries a copy of.

    A fleet finding is copied onto each node it concerns, but only nodes in the inventory are reported: when
    none of them is, the fleet finding itself must stay (in the summary, the HTML and the Markdown)."""
    on_nodes = [f for n in report_nodes for f in n["findings"]]
    carried = {_finding_key(f) for f in on_nodes}
    return on_nodes + [f for f in fleet_findings if _finding_key(f) not in carried]


def all_problems(report) -> list[str]:
    """Every problem once: the fleet's (files, RuntimeClasses), then each node's (its Node and pods)."""
    return list(report.get("problems") or []) + [p for node in report["nodes"] for p in node.get("problems") or []]


def _summary(nodes, fleet_findings) -> dict:
    findings = all_findings(nodes, fleet_findings)
    by_id: dict[str, int] = {}
    for finding in findings:
        by_id[finding["id"]] = by_id.get(finding["id"], 0) + 1
    verdicts: dict[str, int] = {}
    for node in nodes:
        verdicts[node["verdict"]] = verdicts.get(node["verdict"], 0) + 1
    return {
        "nodes": len(nodes),
        "ready": sum(1 for n in nodes if n["ready"]),
        "not_ready": [n["name"] for n in nodes if not n["ready"]],
        "unreachable": [n["name"] for n in nodes if not n["reachable"]],
        "verdicts": verdicts,
        "findings": len(findings),
        "critical": sum(1 for f in findings if f["severity"] == "critical"),
        "findings_by_id": by_id,
    }


def build_report(hosts, kubernetes=None, resource_map=None, title="TEE fleet report") -> dict:
    """The report. ``hosts`` is a list of ``{"name", "node", "result"}`` (``node``: the Kubernetes node name,
    ``result``: the registered ``tee_host_info`` result); ``kubernetes`` as :func:`drift.fleet_drift` takes it."""
    facts, errors = {}, {}
    for host in hosts:
        facts[host["node"]], errors[host["node"]] = host_facts(host.get("result"))
    drift = fleet_drift(facts, kubernetes or {}, resource_map)
    if kubernetes is None:
        for entry in drift["nodes"].values():
            entry["reason"] = NO_KUBERNETES
    nodes = [_node_entry(h, facts[h["node"]], errors[h["node"]], drift["nodes"][h["node"]]) for h in hosts]
    fleet_findings = list(drift["findings"])
    return {
        "schema": SCHEMA,
        "title": title,
        "kubernetes": kubernetes is not None,
        "summary": _summary(nodes, fleet_findings),
        "nodes": nodes,
        "fleet_findings": fleet_findings,
        "problems": drift["problems"],
    }
