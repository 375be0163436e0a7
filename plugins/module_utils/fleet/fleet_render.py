# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""The fleet report (:func:`fleet_report.build_report`) as Markdown for tickets and as one self-contained HTML page.

Pure Python, standard library only. The HTML page has no script, no external stylesheet, font or image: the
key pools are inline SVG, so it renders the same from a mail attachment, a CI artefact or ``file://``.
Every text from hosts and Kubernetes objects is escaped.
"""

from __future__ import annotations

from ansible_collections.confidential.tee.plugins.module_utils.common.emit import html, markdown
from ansible_collections.confidential.tee.plugins.module_utils.fleet.fleet_report import all_findings, all_problems

CHART_LABEL = 200
VERDICT_NOTE = (
    "Verdict: the node's preflight (PASS, FAIL, SKIP), FAIL as well where a critical drift finding concerns it "
    "(guests placed there fail to start however well the host is set up); UNKNOWN: no facts."
)
CHART_BAR = 220
CHART_ROW = 20


def _pool_line(pool) -> str:
    used = "?" if pool["in_use"] is None else pool["in_use"]
    capacity = "?" if pool["capacity"] is None else pool["capacity"]
    source = " (hardware)" if pool["source"] == "hardware" else ""
    return "%s/%s%s" % (used, capacity, source)


def _keys_cell(node) -> str:
    return ", ".join("%s %s" % (name, _pool_line(pool)) for name, pool in node["pools"].items()) or "-"


def _advertised_cell(node) -> str:
    entries = [
        "%s %s" % (a["name"], "?" if a["allocatable"] is None else a["allocatable"])
        for pool in node["pools"].values()
        for a in pool["advertised"]
    ]
    return ", ".join(entries) or "-"


def _findings_cell(node) -> str:
    counts: dict[str, int] = {}
    for finding in node["findings"]:
        counts[finding["severity"]] = counts.get(finding["severity"], 0) + 1
    return ", ".join("%d %s" % (n, s) for s, n in sorted(counts.items())) or "none"


def _headline(report) -> str:
    summary = report["summary"]
    not_ready = summary["not_ready"]
    return "%d nodes: %d ready, %d not ready%s. %d drift findings, %d critical.%s" % (
        summary["nodes"],
        summary["ready"],
        len(not_ready),
        " (%s)" % ", ".join(not_ready) if not_ready else "",
        summary["findings"],
        summary["critical"],
        "" if report["kubernetes"] else " Kubernetes objects were not given: drift not checked.",
    )


def _failed_checks(node) -> list[dict]:
    return [c for s in node["sections"] for c in s["checks"] if c["status"] == "FAIL"]


# ---------------------------------------------------------------------------------------------------
# Markdown
# ---------------------------------------------------------------------------------------------------


def _md(text) -> str:
    # Runs of whitespace fold to one space (table cells stay on one line), then every character that could open
    # Markdown syntax is escaped: host and Kubernetes text is shown, never rendered.
    return markdown.text(" ".join(str(text).split()), "report text")


def _md_cell(text) -> str:
    return markdown.cell(" ".join(str(text).split()), "report table cell")


def render_markdown(report) -> str:
    lines = ["# %s" % _md(report["title"]), "", "**%s**" % _md(_headline(report)), "", "## Nodes", ""]
    lines += [_md(VERDICT_NOTE), ""]
    lines += [
        "| Node | Verdict | Ready | TEE | Kernel | Keys in use/capacity | Advertised | Findings |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for node in report["nodes"]:
        cells = [_md_cell(node["name"]), _md_cell(node["verdict"]), "yes" if node["ready"] else "**no**"]
        cells += [
            _md_cell(cell)
            for cell in (
                node["technology"] or "-",
                node["kernel"] or "-",
                _keys_cell(node),
                _advertised_cell(node),
                _findings_cell(node),
            )
        ]
        lines.append("| %s |" % " | ".join(cells))
    lines += ["", "## Findings and fixes", ""]
    findings = all_findings(report["nodes"], report["fleet_findings"])
    if not findings:
        lines.append("No drift found." if report["kubernetes"] else "Drift not checked: no Kubernetes objects.")
    for finding in findings:
        where = finding["node"] or "fleet"
        lines += [
            "### %s: %s (%s, %s)"
            % (_md(where), _md(finding["title"]), _md(finding["resource"]), _md(finding["severity"])),
            "",
            _md(finding["detail"]),
            "",
            "**Fix:** %s" % _md(finding["fix"]),
            "",
        ]
    lines += ["## Objects and files the report could not use", ""]
    lines += ["- %s" % _md(problem) for problem in all_problems(report)] or ["None."]
    lines += ["", "## Nodes not ready", ""]
    for node in report["nodes"]:
        if node["ready"]:
            continue
        lines += ["### %s" % _md(node["name"]), ""]
        if node["error"]:
            lines.append("- %s" % _md(node["error"]))
        for item in _failed_checks(node):
            lines.append("- **%s** %s. Fix: %s" % (_md(item["name"]), _md(item["message"]), _md(item["fix"])))
        if not node["error"] and not _failed_checks(node):
            lines += ["- %s" % _md(reason) for reason in node["blocking"]]
        lines.append("")
    lines += ["## Preflight per node", ""]
    for node in report["nodes"]:
        title = "### %s (preflight %s)" % (_md(node["name"]), _md(node["preflight_verdict"]))
        lines += [title, "", markdown.code_block(node["table"] or ["(no data)"]), ""]
    return "\n".join(lines).rstrip() + "\n"


# ---------------------------------------------------------------------------------------------------
# HTML
# ---------------------------------------------------------------------------------------------------

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px;color:#1d232a;background:#fff}
h1{font-size:22px;margin:0 0 6px}h2{font-size:18px;margin:28px 0 10px;border-bottom:1px solid #d6dbe0}
h3{font-size:15px;margin:16px 0 6px}
table{border-collapse:collapse;width:100%;margin:8px 0}th,td{border:1px solid #d6dbe0;padding:5px 8px;
text-align:left;vertical-align:top}th{background:#f2f4f6}
.v{display:inline-block;min-width:44px;text-align:center;border-radius:3px;padding:1px 6px;font-weight:600;
font-size:12px;color:#fff}.PASS{background:#1f7a3a}.FAIL{background:#b42318}.SKIP{background:#6b7480}
.UNKNOWN{background:#b5651d}.critical{color:#b42318;font-weight:600}.warning{color:#9a6700;font-weight:600}
.info{color:#475467}.fix{background:#f6f8fa;border-left:3px solid #1f6feb;padding:6px 10px;margin:6px 0}
.cards{display:flex;flex-wrap:wrap;gap:16px}.card{border:1px solid #d6dbe0;border-radius:6px;padding:10px 12px;
width:440px}.muted{color:#6b7480}svg text{font:12px system-ui,sans-serif;fill:#1d232a}
details{margin:6px 0}pre{background:#f6f8fa;padding:8px;overflow-x:auto;font-size:12px}
"""


def _e(text) -> str:
    return html.text(text, "report text")


def _a(text) -> str:
    return html.attr(text, "report attribute")


def _badge(verdict) -> str:
    return '<span class="v %s">%s</span>' % (_a(verdict), _e(verdict))


def _bar_rows(resource, pool) -> list[tuple[str, int | None, int | None, str]]:
    """``(label, length, filled, colour)`` rows: the kernel's pool, then each advertised resource."""
    rows = [("kernel %s %s" % (resource, _pool_line(pool)), pool["capacity"], pool["in_use"], "#1f6feb")]
    for advertised in pool["advertised"]:
        requested, allocatable = advertised["requested"], advertised["allocatable"]
        rows.append(
            (
                "%s %s/%s"
                % (
                    advertised["name"],
                    "?" if requested is None else requested,
                    "?" if allocatable is None else allocatable,
                ),
                advertised["allocatable"],
                advertised["requested"],
                "#8250df" if advertised["kind"].startswith("nfd") else "#bf3989",
            )
        )
    return rows


def render_chart(node_name, resource, pool) -> str:
    """A small SVG: the kernel's keys (in use of capacity) and every advertised pool (requested of allocatable)."""
    rows = _bar_rows(resource, pool)
    scale = max([r[1] or 0 for r in rows] + [r[2] or 0 for r in rows] + [1])
    height = CHART_ROW * len(rows) + 4
    parts = [
        '<svg width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-label="%s key pools on %s">'
        % (CHART_LABEL + CHART_BAR, height, CHART_LABEL + CHART_BAR, height, _a(resource), _a(node_name))
    ]
    for index, (label, length, filled, colour) in enumerate(rows):
        y = index * CHART_ROW + 2
        parts.append('<text x="0" y="%d">%s</text>' % (y + 13, _e(label)))
        if length is None:
            parts.append('<text x="%d" y="%d" class="muted">capacity unknown</text>' % (CHART_LABEL, y + 13))
            continue
        width = round(CHART_BAR * length / scale)
        parts.append(
            '<rect x="%d" y="%d" width="%d" height="14" fill="none" stroke="%s"/>'
            % (CHART_LABEL, y, max(width, 1), colour)
        )
        if filled:
            used = round(CHART_BAR * filled / scale)
            parts.append('<rect x="%d" y="%d" width="%d" height="14" fill="%s"/>' % (CHART_LABEL, y, used, colour))
    parts.append("</svg>")
    return "".join(parts)


def _node_rows(report) -> list[str]:
    rows = []
    for node in report["nodes"]:
        rows.append(
            "<tr><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>"
            % (
                _e(node["name"]),
                _badge(node["verdict"]),
                "yes" if node["ready"] else '<span class="critical">no</span>',
                _e(node["technology"] or "-"),
                _e(node["kernel"] or "-"),
                _e(_keys_cell(node)),
                _e(_advertised_cell(node)),
                _e(_findings_cell(node)),
            )
        )
    return rows


def _finding_html(finding) -> str:
    return '<h3>%s: %s <span class="%s">(%s, %s)</span></h3><p>%s</p><div class="fix"><b>Fix:</b> %s</div>' % (
        _e(finding["node"] or "fleet"),
        _e(finding["title"]),
        _a(finding["severity"]),
        _e(finding["resource"]),
        _e(finding["severity"]),
        _e(finding["detail"]),
        _e(finding["fix"]),
    )


def _card(node) -> str:
    charts = "".join(render_chart(node["name"], resource, pool) for resource, pool in node["pools"].items())
    note = node["drift_reason"] or ""
    if not charts:
        charts = '<p class="muted">no TEE keys known on this node</p>'
    gpu = node["gpu"]
    if gpu:
        charts += "<p>%s &#215; %s: CC %s, %s</p>" % (
            gpu["count"],
            _e(", ".join(gpu["names"]) or "NVIDIA GPU"),
            _e(gpu["cc_state"] or "unknown"),
            _e(gpu["ready_state"] or "ready state unknown"),
        )
    return '<div class="card"><h3>%s %s</h3>%s<p class="muted">%s</p></div>' % (
        _e(node["name"]),
        _badge(node["verdict"]),
        charts,
        _e(note),
    )


def _not_ready_html(node) -> str:
    items = []
    if node["error"]:
        items.append("<li>%s</li>" % _e(node["error"]))
    for check in _failed_checks(node):
        items.append(
            '<li><b>%s</b> %s<div class="fix"><b>Fix:</b> %s</div></li>'
            % (_e(check["name"]), _e(check["message"]), _e(check["fix"]))
        )
    if not items:
        items = ["<li>%s</li>" % _e(reason) for reason in node["blocking"]]
    return "<h3>%s</h3><ul>%s</ul>" % (_e(node["name"]), "".join(items))


def render_html(report) -> str:
    findings = all_findings(report["nodes"], report["fleet_findings"])
    body = [
        "<h1>%s</h1><p><b>%s</b></p>" % (_e(report["title"]), _e(_headline(report))),
        '<h2>Nodes</h2><p class="muted">%s</p>' % _e(VERDICT_NOTE),
        "<table><thead><tr><th>Node</th><th>Verdict</th><th>Ready</th><th>TEE</th><th>Kernel</th>"
        "<th>Keys in use/capacity</th><th>Advertised</th><th>Findings</th></tr></thead><tbody>",
        *_node_rows(report),
        "</tbody></table>",
        '<h2>Key pools</h2><p class="muted">Kernel: keys in use (filled) of capacity. Advertised: requested by '
        'bound pods (filled) of allocatable.</p><div class="cards">',
        *(_card(node) for node in report["nodes"]),
        "</div><h2>Findings and fixes</h2>",
        *(_finding_html(f) for f in findings),
        "" if findings else "<p>%s</p>" % ("No drift found." if report["kubernetes"] else "Drift not checked."),
        "<h2>Objects and files the report could not use</h2>",
        "<ul>%s</ul>" % "".join("<li>%s</li>" % _e(problem) for problem in all_problems(report))
        if all_problems(report)
        else "<p>None.</p>",
        "<h2>Nodes not ready</h2>",
        *(_not_ready_html(n) for n in report["nodes"] if not n["ready"]),
        "<h2>Preflight per node</h2>",
        *(
            "<details><summary>%s %s</summary><pre>%s</pre></details>"
            % (_e(n["name"]), _badge(n["preflight_verdict"]), _e("\n".join(n["table"] or ["(no data)"])))
            for n in report["nodes"]
        ),
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        "<title>%s</title><style>%s</style></head><body>\n%s\n</body></html>\n"
        % (_e(report["title"]), _CSS.strip(), "\n".join(body))
    )
