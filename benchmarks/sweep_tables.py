"""Markdown tables of a ``teesim sweep --out DIR`` report (any sweep; the docs' are written by sweep_docs.py).

    teesim sweep quick faults --seeds 1-30 --out report/sweep
    python benchmarks/sweep_tables.py report/sweep/sweep.json

Every cell is a mean over the seeds with the half-width of its 95 % confidence interval (Student t, as
``teesim sweep`` computes it); "runs failing outside the window" counts the runs with at least one Kata
or KubeVirt failure outside the race window, with a 95 % Wilson interval for the proportion.
"""

from __future__ import annotations

import json
import math
import sys
from collections import defaultdict
from pathlib import Path

_K, _V, _E = "kata", "kubevirt", "external"
COLUMNS = (
    ("failed launches k/v/e", tuple(f"failed_launches_by_consumer.{c}" for c in (_K, _V, _E))),
    ("outside window k/v/e", tuple(f"failed_outside_race_window.{c}" for c in (_K, _V, _E))),
    ("never started k/v", ("kata.never_started", "kubevirt.never_started")),
    ("rejected at restart k/v", ("rejected_at_kubelet_restart.kata", "rejected_at_kubelet_restart.kubevirt")),
    ("admission failures", ("admission_failures",)),
    ("stranded key-s VMIs / anyone", ("stranded_key_seconds", "stranded_for_all_key_seconds")),
    ("pending at end", ("pending_at_end",)),
)


def _cell(summary: dict | None) -> str:
    if not summary or summary.get("mean") is None:
        return "n/a"
    mean = summary["mean"]
    ci = summary.get("ci95")
    half = (ci[1] - ci[0]) / 2 if ci else 0.0
    if abs(mean) >= 100:
        return f"{mean:,.0f} ± {half:,.0f}"
    return f"{mean:.1f} ± {half:.1f}"


def wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95 % Wilson score interval of a proportion (0 successes still gets an upper bound)."""
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(centre - half, 0.0), min(centre + half, 1.0))


def outside_runs(runs: list[dict]) -> dict[tuple[str, str], tuple[int, int]]:
    """(scenario, strategy) -> (runs with a Kata or KubeVirt failure outside the window, runs)."""
    counts: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for run in runs:
        outside = run["metrics"]["failed_outside_race_window"]
        entry = counts[(run["scenario"], run["strategy"])]
        entry[0] += 1 if outside["kata"] + outside["kubevirt"] else 0
        entry[1] += 1
    return {k: (v[0], v[1]) for k, v in counts.items()}


def _order(report: dict, names: list[str]) -> list[str]:
    """``names`` in the registry's order (the baseline first), as the sweep lists its strategies."""
    order = report["sweep"].get("strategies") or []
    return [name for name in order if name in names] or list(names)


def render_scenario_table(report: dict, scenario: str) -> str:
    """One scenario's table: every strategy, mean ± half-width per column."""
    runs, unordered = outside_runs(report["runs"]), report["results"][scenario]
    seeds = report["sweep"].get("seeds") or []
    lines = [
        f"**{scenario}** (mean ± 95 % interval half-width over {len(seeds)} seeds)",
        "",
        "| strategy | runs failing outside the window | " + " | ".join(c for c, _ in COLUMNS) + " |",
        "|---|---|" + "---|" * len(COLUMNS),
    ]
    for strategy in _order(report, list(unordered)):
        bad, n = runs[(scenario, strategy)]
        cells = [" / ".join(_cell(unordered[strategy].get(m)) for m in keys) for _, keys in COLUMNS]
        lines.append(f"| `{strategy}` | {bad}/{n} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render_total_table(report: dict, scenarios: list[str], title: str) -> str:
    """Runs with a Kata or KubeVirt failure outside the window, per strategy, summed over ``scenarios``."""
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for (scenario, strategy), (bad, n) in outside_runs(report["runs"]).items():
        if scenario in scenarios:
            totals[strategy][0] += bad
            totals[strategy][1] += n
    lines = [f"**{title}**", "", "| strategy | runs | share | 95 % interval |", "|---|---|---|---|"]
    for strategy in _order(report, list(totals)):
        bad, n = totals[strategy]
        low, high = wilson(bad, n)
        lines.append(f"| `{strategy}` | {bad}/{n} | {100 * bad / n:.1f} % | {100 * low:.1f} to {100 * high:.1f} % |")
    return "\n".join(lines)


def main(path: str) -> int:
    report = json.loads(Path(path).read_text(encoding="utf-8"))
    print(f"<!-- from {path}: seeds {report['sweep'].get('seeds')} -->")
    for scenario in report["results"]:
        print("\n" + render_scenario_table(report, scenario))
    print(
        "\n"
        + render_total_table(
            report,
            list(report["results"]),
            "Runs with a Kata or KubeVirt failure outside the race window, every scenario",
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "report/sweep/sweep.json"))
