# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""One run of the fleet report: its options, its inputs checked, the report built and its files written.

The one home of what ``tee_fleet_report`` does, shared by the module (on a host, through AnsiballZ) and by its
action plugin, which runs it inside the controller's worker when the task runs on the controller itself: the
report is the controller's file, and one module round trip there costs a new interpreter, the import of
``ansible.module_utils.basic``, the compile of these sources and every host's facts packed into its payload
(about half a second of CPU at 100 hosts, in the fleet playbook's serial part). Both paths validate the same
:data:`ARGUMENT_SPEC` and return the same result.
"""

from __future__ import annotations

import json
import os

from ansible_collections.confidential.tee.plugins.module_utils.common import tee
from ansible_collections.confidential.tee.plugins.module_utils.common.changes import Changes
from ansible_collections.confidential.tee.plugins.module_utils.common.emit import json as emit_json
from ansible_collections.confidential.tee.plugins.module_utils.common.errors import TeeError
from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import local_host
from ansible_collections.confidential.tee.plugins.module_utils.common.results import PROBLEMS, recorded_changes
from ansible_collections.confidential.tee.plugins.module_utils.fleet.fleet_render import render_html, render_markdown
from ansible_collections.confidential.tee.plugins.module_utils.fleet.fleet_report import (
    all_findings,
    all_problems,
    build_report,
    compact_result,
    metrics_file_name,
)
from ansible_collections.confidential.tee.plugins.module_utils.fleet.prometheus import render_metrics

ARGUMENT_SPEC = dict(
    dest=dict(type="path", required=True),
    hosts=dict(
        type="list",
        elements="dict",
        required=True,
        options=dict(name=dict(type="str", required=True), node=dict(type="str"), result=dict(type="raw")),
    ),
    kubernetes=dict(type="dict"),
    kubernetes_dir=dict(type="path"),
    formats=dict(
        type="list",
        elements="str",
        choices=["html", "markdown", "json", "prometheus"],
        default=["html", "markdown", "json", "prometheus"],
    ),
    prometheus_per_node=dict(type="bool", default=True),
    resource_map=dict(type="dict", default={}),
    title=dict(type="str", default="TEE fleet report"),
)
MUTUALLY_EXCLUSIVE = [("kubernetes", "kubernetes_dir")]

KUBE_FILES = (
    ("nodes", "nodes.json"),
    ("pods", "pods.json"),
    ("runtime_classes", "runtimeclasses.json"),
    ("node_feature_rules", "nodefeaturerules.json"),
)
MISC_NAMES = tee.MISC_REPORT_ORDER
MAX_JSON_BYTES = 512 * 1024 * 1024


class ReportError(Exception):
    """Input the report cannot be built from, or files it could not write; the message says what and where."""

    files = None  # the files planned when a write failed (deprecated: changes)
    changes = None  # the changes value of the files planned when a write failed


def read_kubernetes_dir(directory):
    """``(objects, problems)`` from the offline dump; raises :class:`ReportError` for unreadable JSON."""
    if not os.path.isdir(directory):
        raise ReportError("kubernetes_dir %s is not a directory" % directory)
    objects, problems = {}, []
    for key, filename in KUBE_FILES:
        path = os.path.join(directory, filename)
        if not os.path.exists(path):
            objects[key] = []
            problems.append("%s is missing: no %s" % (path, key.replace("_", " ")))
            continue
        if not os.path.isfile(path) or os.path.getsize(path) > MAX_JSON_BYTES:
            raise ReportError("%s is not a regular file of at most %d bytes" % (path, MAX_JSON_BYTES))
        try:
            with open(path, "rb") as handle:
                objects[key] = json.loads(handle.read().decode("utf-8"), parse_int=_json_int)
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise ReportError(
                "%s is not readable JSON (%s): write it with `kubectl get <kind> -A -o json > %s`"
                % (path, exc, filename)
            ) from None
    return objects, problems


def _json_int(text):
    """A JSON integer; one too long for Python to convert (4300 digits) stays text, which the quantity parser
    reads as apimachinery reads a JSON number: from its text."""
    return int(text) if len(text) <= 4000 else text


def host_entries(hosts):
    """The ``hosts`` option as the report takes it: each result decoded and compacted, one host per node."""
    entries, seen = [], {}
    for index, host in enumerate(hosts):
        name = host.get("name")
        if not isinstance(name, str) or not name:
            raise ReportError("hosts[%d] has no name" % index)
        node = host.get("node") or name
        if node in seen:
            raise ReportError(
                "hosts %s and %s both name the Kubernetes node %s: give each host its own node"
                % (seen[node], name, node)
            )
        seen[node] = name
        entries.append({"name": name, "node": node, "result": compact_result(_result(name, host.get("result")))})
    return entries


def _result(name, value):
    """A result given as a dict, as JSON text (from the fleet_hosts filter) or not at all."""
    if value is None or isinstance(value, dict):
        return value
    if isinstance(value, str):
        try:
            decoded = json.loads(value)
        except ValueError:
            decoded = None
        if isinstance(decoded, dict):
            return decoded
    raise ReportError(
        "hosts entry %s: result must be the registered tee_host_info result (a dict, or its JSON text), got %s"
        % (name, type(value).__name__)
    )


class Writer:
    """Every file of the report, planned in the one change recorder and written all or nothing.

    Renamed into place: a reader (node_exporter, a browser) sees the old or the new file, never half of one. Not
    fsync'ed and not backed up: a report is regenerated by the next run, and 100 fsyncs cost most of a second.
    """

    def __init__(self, check_mode):
        self.changes = Changes(local_host(), check_mode, backup=False, durable=False)
        self.planned = []  # (path, format, FileChange, shown in the diff)
        self.textfiles = {}  # node name -> its metrics file

    def write(self, path, content, fmt, diff=False):
        self.planned.append((path, fmt, self.changes.file(path, content, mode=0o644), diff))

    @property
    def files(self):
        return [{"path": path, "format": fmt, "changed": change.changed} for path, fmt, change, _diff in self.planned]

    @property
    def diffs(self):
        shown = {self.changes.display(path) for path, _fmt, _change, diff in self.planned if diff}
        return [entry for entry in self.changes.diff() if entry["before_header"] in shown]


def write_report(writer, report, dest, formats, per_node):
    dest = os.path.abspath(dest)
    if "html" in formats:
        writer.write(os.path.join(dest, "report.html"), render_html(report), "html")
    if "markdown" in formats:
        writer.write(os.path.join(dest, "report.md"), render_markdown(report), "markdown", diff=True)
    if "json" in formats:
        writer.write(os.path.join(dest, "report.json"), emit_json.dumps(report, "report"), "json")
    if "prometheus" in formats:
        writer.write(os.path.join(dest, "tee-fleet.prom"), render_metrics(report["nodes"]), "prometheus", diff=True)
        if per_node:
            for node in report["nodes"]:
                path = os.path.join(dest, "textfile", metrics_file_name(node["node"]))
                writer.textfiles[node["node"]] = path
                writer.write(path, render_metrics([node]), "prometheus")
    writer.changes.apply()


def run_report(params, check_mode, diff):
    """The result of one run with validated ``params``; raises :class:`ReportError` (with ``files`` set when a
    write failed part way: nothing was renamed into place then)."""
    wrong = {k: v for k, v in params["resource_map"].items() if v not in MISC_NAMES}
    if wrong:
        raise ReportError(
            "resource_map values must be one of %s (the misc resource the extended resource counts), got %s"
            % (", ".join(MISC_NAMES), wrong)
        )
    if os.path.exists(params["dest"]) and not os.path.isdir(params["dest"]):
        raise ReportError("dest %s exists and is not a directory: point dest at a directory" % params["dest"])
    hosts = host_entries(params["hosts"])
    kubernetes, problems = params["kubernetes"], []
    if params["kubernetes_dir"]:
        kubernetes, problems = read_kubernetes_dir(params["kubernetes_dir"])
    report = build_report(hosts, kubernetes, params["resource_map"], params["title"])
    report["problems"] = problems + report["problems"]
    writer = Writer(check_mode)
    try:
        write_report(writer, report, params["dest"], params["formats"], params["prometheus_per_node"])
    except (TeeError, OSError) as exc:
        error = ReportError("cannot write the report under %s: %s" % (params["dest"], exc))
        error.files = writer.files
        error.changes = recorded_changes(writer.changes)
        raise error from None
    result = dict(
        changed=any(f["changed"] for f in writer.files),
        changes=recorded_changes(writer.changes),
        files=writer.files,  # deprecated: changes.entries, and each file's format from its name (0.3.0)
        summary=report["summary"],
        findings=all_findings(report["nodes"], report["fleet_findings"]),
        textfiles=writer.textfiles,
    )
    result[PROBLEMS] = all_problems(report)
    if diff:
        result["diff"] = writer.diffs
    return result
