"""The simulator's results in the docs, tables and the sentences about them, from one ``teesim sweep``.

    teesim sweep <every bundled scenario> --seeds 1-30 --out report/sweep    # the command in SWEEP_COMMAND
    python benchmarks/sweep_docs.py report/sweep/sweep.json --write          # rewrite the generated blocks
    python benchmarks/sweep_docs.py report/sweep/sweep.json                  # check them: exit 1 and a diff

A generated block sits between ``<!-- sweep-docs:NAME -->`` and ``<!-- /sweep-docs:NAME -->`` in README.md,
docs/simulator.md or docs/key-pools.md; everything between the markers is this script's. Every number and
every comparison word in a block ("more", "about as much", "in every scenario but ...") is computed from
``sweep.json``; a sentence whose point the data no longer supports is not printed: :class:`ClaimBroken` names
it, for a person to rewrite. The sweep must cover every bundled scenario, every strategy and at least 30
seeds. ``tests/simulator/report/test_sweep_docs.py`` runs the docs' own command and this check.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
import textwrap
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "simulator"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from sweep_tables import render_scenario_table, render_total_table, wilson  # noqa: E402
from teesim.report.sweep import summarise  # noqa: E402
from teesim.sim.scenario import bundled_scenarios  # noqa: E402
from teesim.strategies.base import STRATEGIES  # noqa: E402

DOC_FILES = ("README.md", "docs/simulator.md", "docs/key-pools.md")
MIN_SEEDS = 30
SEEDS = "1-30"
# AMD ciphertext hiding fails every pool that reads the joint sev_es count: a platform setting, not a
# tracking strategy's problem, so its runs are counted apart from the others'.
APART = "snp-ciphertext-hiding"
TDX, SNP = "double-pool-tdx", "double-pool-snp"
BASE, UNIFIED, DRA, UNSERVED = "double-pool", "unified-reconciling", "dra-overhead-served", "dra-overhead-unserved"
# tee_key_pool_mode: kernel as docs/key-pools.md deploys it: the agent's decision code, the node's headroom for VMs
# outside Kubernetes as its --reserve (kernel_key_pool_reserve).
KERNEL = "kernel-pool"
KERNEL_NO_RESERVE = "kernel-pool-no-reserve"  # the same with the role's default, no --reserve
KOK, NFD, REC, SGR, SPLIT = (
    "kata-overhead-on-kubevirt",
    "nfd-shared",
    "reconciling",
    "secure-guest-resources",
    "split-nodes",
)
STRANDED, STRANDED_ALL = "stranded_key_seconds", "stranded_for_all_key_seconds"
KATA, VIRT, EXT = (f"failed_launches_by_consumer.{c}" for c in ("kata", "kubevirt", "external"))
KATA_OUT, VIRT_OUT, EXT_OUT = (f"failed_outside_race_window.{c}" for c in ("kata", "kubevirt", "external"))
OUT = (KATA_OUT, VIRT_OUT, EXT_OUT)


def sweep_command() -> str:
    """The sweep the docs name: every bundled scenario, every strategy, seeds 1-30."""
    names = " ".join(sorted(bundled_scenarios()))
    return f"teesim sweep {names} --seeds {SEEDS} --out report/sweep"


class ClaimBroken(ValueError):
    """A sentence of the docs whose point the sweep does not support: rewrite it."""


def require(condition: bool, claim: str, evidence: str) -> None:
    if not condition:
        raise ClaimBroken(f"{claim}: the sweep says {evidence}")


def num(value: float) -> str:
    """A mean as the tables print it (a plain 0 where nothing happened)."""
    if value == 0:
        return "0"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.1f}"


def series(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


class Sweep:
    """Read access to one ``sweep.json`` for the sentences."""

    def __init__(self, report: dict[str, Any]) -> None:
        self.report = report
        self.results: dict[str, dict[str, dict[str, Any]]] = report["results"]
        self.seeds: list[int] = report["sweep"]["seeds"]
        self.scenarios: list[str] = report["sweep"]["scenarios"]
        self.pooled = [s for s in self.scenarios if s != APART]
        self._outside: dict[tuple[str, str], list[int]] = {}
        self._stranding: dict[tuple[str, str], int] = {}
        # Per run: failures inside the race window (every consumer), and whether an external VM failed outside it.
        self._in_window: dict[tuple[str, str], list[float]] = {}
        self._external_outside: dict[tuple[str, str], int] = {}
        for run in report["runs"]:
            key = (run["scenario"], run["strategy"])
            metrics = run["metrics"]
            outside = metrics["failed_outside_race_window"]
            counts = self._outside.setdefault(key, [0, 0])
            counts[0] += 1 if outside["kata"] + outside["kubevirt"] else 0
            counts[1] += 1
            self._stranding[key] = self._stranding.get(key, 0) + (1 if metrics[STRANDED] else 0)
            failed = metrics["failed_launches_by_consumer"]
            inside = sum(failed[c] - outside[c] for c in ("kata", "kubevirt", "external"))
            self._in_window.setdefault(key, []).append(float(inside))
            self._external_outside[key] = self._external_outside.get(key, 0) + (1 if outside["external"] else 0)

    def check_coverage(self) -> None:
        bundled, strategies = sorted(bundled_scenarios()), self.report["sweep"]["strategies"]
        require(self.scenarios == bundled, "the docs' sweep covers every bundled scenario", f"{self.scenarios}")
        require(sorted(strategies) == sorted(STRATEGIES), "the docs' sweep runs every strategy", f"{strategies}")
        require(len(self.seeds) >= MIN_SEEDS, f"the docs' sweep has >= {MIN_SEEDS} seeds", f"{len(self.seeds)}")

    def mean(self, scenario: str, strategy: str, metric: str) -> float:
        return float(self.results[scenario][strategy][metric]["mean"])

    def half(self, scenario: str, strategy: str, metric: str) -> float:
        low, high = self.results[scenario][strategy][metric]["ci95"]
        return (high - low) / 2

    def n(self, scenario: str, strategy: str, metric: str) -> str:
        return num(self.mean(scenario, strategy, metric))

    def pm(self, scenario: str, strategy: str, metric: str) -> str:
        """``mean ± half-width`` exactly as the tables print the cell."""
        mean, half = self.mean(scenario, strategy, metric), self.half(scenario, strategy, metric)
        return f"{mean:,.0f} ± {half:,.0f}" if abs(mean) >= 100 else f"{mean:.1f} ± {half:.1f}"

    def interval(self, scenario: str, strategy: str, metric: str) -> tuple[float, float]:
        low, high = self.results[scenario][strategy][metric]["ci95"]
        return float(low), float(high)

    def compare(self, scenario: str, one: str, other: str, metric: str) -> str:
        """ "more", "less" or "about as much": the 95 % intervals of the two means apart or overlapping."""
        (low1, high1), (low2, high2) = self.interval(scenario, one, metric), self.interval(scenario, other, metric)
        if low1 > high2:
            return "more"
        if high1 < low2:
            return "less"
        return "about as much"

    def outside(self, scenario: str, strategy: str) -> tuple[int, int]:
        bad, runs = self._outside[(scenario, strategy)]
        return bad, runs

    def outside_pooled(self, strategy: str) -> tuple[int, int]:
        pairs = [self.outside(s, strategy) for s in self.pooled]
        return sum(p[0] for p in pairs), sum(p[1] for p in pairs)

    def in_window(self, scenario: str, strategy: str) -> str:
        """Failed launches inside the race window a run, every consumer: ``mean ± half-width`` as the tables print."""
        found = summarise(self._in_window[(scenario, strategy)])
        mean, ci = found["mean"], found["ci95"] or [found["mean"], found["mean"]]
        half = (ci[1] - ci[0]) / 2
        return f"{mean:,.0f} ± {half:,.0f}" if abs(mean) >= 100 else f"{mean:.1f} ± {half:.1f}"

    def external_outside(self, scenario: str, strategy: str) -> int:
        """Runs in which a VM outside Kubernetes failed outside the race window."""
        return self._external_outside[(scenario, strategy)]

    def runs_stranding(self, scenario: str, strategy: str) -> int:
        return self._stranding[(scenario, strategy)]

    def where(self, strategy: str, metric: str, scenarios: Iterable[str] | None = None) -> list[str]:
        """The scenarios where ``metric``'s mean is not 0."""
        return [s for s in (scenarios or self.scenarios) if self.mean(s, strategy, metric)]


def key_seconds(scenario: str) -> float:
    """Every key of every node of a bundled scenario for its whole run."""
    data = yaml.safe_load(bundled_scenarios()[scenario].read_text(encoding="utf-8"))
    keys = sum(sum(node["capacity"].values()) * node.get("count", 1) for node in data["nodes"])
    return float(keys * data["duration"])


def scenario_setting(scenario: str, key: str) -> Any:
    data = yaml.safe_load(bundled_scenarios()[scenario].read_text(encoding="utf-8"))
    return (data.get("settings") or {}).get(key)


def pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f}" if 100 * part / whole >= 0.1 else f"{100 * part / whole:.2f}"


def of_runs(sw: Sweep, strategy: str) -> str:
    bad, runs = sw.outside_pooled(strategy)
    return f"{bad} of {runs}"


# -- the blocks ---------------------------------------------------------------------------------------

WIDTH = 116


def para(*parts: str) -> str:
    """One Markdown paragraph from sentence fragments, wrapped like the docs around it."""
    return textwrap.fill(" ".join(parts), WIDTH, break_long_words=False, break_on_hyphens=False)


def bullet(*parts: str) -> str:
    text = " ".join(parts)
    return textwrap.fill(
        text, WIDTH, initial_indent="- ", subsequent_indent="  ", break_long_words=False, break_on_hyphens=False
    )


def block_scope(sw: Sweep) -> str:
    """README: which sweep every result of the docs comes from."""
    return (
        f"The simulator's result tables in the docs come from one sweep of all {len(sw.scenarios)} bundled"
        f" scenarios under every strategy, seeds {sw.seeds[0]}-{sw.seeds[-1]}, with 95 % intervals."
    )


def block_results_intro(sw: Sweep) -> str:
    runs, seeds, pooled = len(sw.report["runs"]), len(sw.seeds), len(sw.pooled)
    first = para(
        "One run is one draw of the workload, so no claim below rests on one seed. Every number and every comparison",
        f"in this section comes from one sweep: all {len(sw.scenarios)} bundled scenarios under every strategy with",
        f"seeds {sw.seeds[0]} to {sw.seeds[-1]} ({runs:,} runs). The tables *and the sentences about them* are written",
        "from its `sweep.json` by `benchmarks/sweep_docs.py`, and `tests/simulator/report/test_sweep_docs.py` runs",
        "these two commands and fails when anything they write differs from what is written here:",
    )
    console = f"```console\n$ {sweep_command()}\n$ python benchmarks/sweep_docs.py report/sweep/sweep.json --write\n```"
    last = para(
        f"Cells are the mean over the {seeds} seeds ± the half-width of its 95 % confidence interval (Student t);",
        '`k/v/e` = Kata / KubeVirt / external VMs. "Runs failing outside the window" counts the runs with at least',
        "one Kata or KubeVirt failure outside the race window. Counts of runs summed over scenarios",
        f'("{pooled * seeds} runs": {pooled} scenarios x {seeds} seeds, one strategy\'s) leave out `{APART}`,',
        "shown on its own below.",
    )
    return f"{first}\n\n{console}\n\n{last}"


def block_tables(sw: Sweep) -> str:
    bad_u, runs = sw.outside_pooled(UNIFIED)
    low, high = wilson(bad_u, runs)
    title = f"Runs with a Kata or KubeVirt failure outside the race window, every scenario but `{APART}`"
    parts = [render_total_table(sw.report, sw.pooled, title)]
    if bad_u == 0:
        parts.append(
            para(
                f"A 95 % interval of {100 * low:.1f} to {100 * high:.1f} % for 0 of {runs} runs says: if such",
                f"failures happen, they happen in fewer than about one run in {round(1 / high)} of these scenarios.",
            )
        )
    parts += [render_scenario_table(sw.report, s) for s in sw.pooled]
    return "\n\n".join(parts)


def block_apart(sw: Sweep) -> str:
    strategies = list(sw.results[APART])
    always = [s for s in strategies if sw.outside(APART, s)[0] == sw.outside(APART, s)[1]]
    rest = [s for s in strategies if s not in always]
    require(UNIFIED in always and DRA in always, "ciphertext hiding fails even the kernel-reconciled pools", "no")
    require(
        sorted(rest) == sorted([KERNEL, KERNEL_NO_RESERVE, UNSERVED]),
        "only the kernel pools and unserved fail less",
        f"{rest}",
    )
    require(sw.mean(APART, UNSERVED, "launched.kata") == 0, "unserved refuses every Kata pod", "Kata pods launched")
    bad, runs = sw.outside(APART, UNSERVED)
    kernel_bad, _ = sw.outside(APART, KERNEL)
    intro = para(
        "**AMD ciphertext hiding** is kept out of the run counts above (it is a platform setting, not a tracking",
        "strategy's problem); its table comes from the same sweep.",
    )
    after = para(
        f"Every strategy that pools the joint `sev_es` count fails the same way, the kernel-reconciled `{UNIFIED}`",
        f"and `{DRA}` included ({runs} of {runs} runs outside the window): SNP guests past ASID 16 fail with EBUSY",
        "while `misc.current sev_es` still shows ASIDs free, and no pool knows that SNP has only 16 of them per node.",
        f"`{UNSERVED}` fails outside the window in only {bad} of {runs} runs because it refuses every Kata pod at",
        "admission. What fixes it is advertising the SNP range, not a better tracker: the collection's",
        "NodeFeatureRule publishes the fixed SNP count on such nodes ([key-pools.md](key-pools.md)), and the kernel",
        f"mode's agent (`{KERNEL}`) caps its pool at the SNP range, counting every used key against it since",
        f"`misc.current` cannot tell SEV-ES from SNP guests: {kernel_bad} of {runs} runs outside the window.",
    )
    return f"{intro}\n\n{render_scenario_table(sw.report, APART)}\n\n{after}"


def _claim_double_pool(sw: Sweep) -> str:
    short = [s for s in sw.pooled if sw.outside(s, BASE)[0] < sw.outside(s, BASE)[1]]
    require(len(short) < len(sw.pooled) / 2, "the double pool fails in nearly every run", f"short in {short}")
    but = f" but {series([f'`{s}` ({sw.outside(s, BASE)[0]}/{sw.outside(s, BASE)[1]})' for s in short])}"
    runs = len(sw.seeds)
    same = " too" if sw.outside_pooled("kubevirt-static") == sw.outside_pooled(BASE) else ""
    return bullet(
        f"**The double pool fails all the time, for every consumer.** On `{TDX}` {sw.pm(TDX, BASE, KATA)} Kata and",
        f"{sw.pm(TDX, BASE, VIRT)} KubeVirt failed launches a run, {sw.n(TDX, BASE, KATA_OUT)} and",
        f"{sw.n(TDX, BASE, VIRT_OUT)} of them outside any race window; {runs} of {runs} runs fail outside the window",
        f"in every scenario{but if short else ''}, {of_runs(sw, BASE)} in all. Retries make it worse: the kubelet",
        "retries a Kata sandbox every 10 to 15 s and virt-handler a VMI with a doubling back-off, each try another",
        "failed launch. `kubevirt-static` (Kata asks for nothing) fails outside the window in",
        f"{of_runs(sw, 'kubevirt-static')} runs{same}.",
    )


def _claim_one_pool(sw: Sweep) -> str:
    base = sw.mean(TDX, BASE, KATA) + sw.mean(TDX, BASE, VIRT)
    one = sw.mean(TDX, KOK, KATA) + sw.mean(TDX, KOK, VIRT)
    require(one < base / 2, "one capacity-only pool removes most failures on TDX", f"{one} of {base}")
    snp_base = sw.mean(SNP, BASE, KATA) + sw.mean(SNP, BASE, VIRT)
    snp_one = sw.mean(SNP, KOK, KATA) + sw.mean(SNP, KOK, VIRT)
    require(snp_one > snp_base / 2, "kata-overhead-on-kubevirt keeps most of the SNP gap", f"{snp_one}/{snp_base}")
    return bullet(
        f"**One capacity-only pool** (`{NFD}`, `{KOK}`) removes most Kata-versus-KubeVirt failures",
        f"({sw.n(TDX, KOK, KATA)} / {sw.n(TDX, KOK, VIRT)} on `{TDX}`) but not the ones caused by keys used outside",
        f"the pool: it still fails outside the window in {of_runs(sw, NFD)} and {of_runs(sw, KOK)} runs; on SNP",
        f"`{KOK}` keeps most of today's gap (SEV-ES VMIs charge ESIDs and request none:",
        f"{sw.n(SNP, KOK, KATA)} / {sw.n(SNP, KOK, VIRT)}).",
    )


def _claim_reconciling(sw: Sweep) -> str:
    leaks = sw.where(REC, VIRT_OUT)
    require(set(leaks) <= {APART}, "reconciling protects VMIs", f"KubeVirt failures outside the window on {leaks}")
    but = f" but {series([f'`{s}` ({sw.n(s, REC, VIRT_OUT)})' for s in leaks])}" if leaks else ""
    return bullet(
        f"**`{REC}` protects VMIs only**: 0 KubeVirt failures outside the window in every scenario{but}, while Kata",
        f"still fails outside it ({sw.pm(TDX, REC, KATA_OUT)} a run on `{TDX}`): {of_runs(sw, REC)} runs.",
    )


def _claim_unified(sw: Sweep) -> str:
    bad_u, runs = sw.outside_pooled(UNIFIED)
    bad_d, _ = sw.outside_pooled(DRA)
    require(bad_u == 0 and bad_d == 0, "unified and DRA-served fail only inside the window", f"{bad_u}, {bad_d}")
    low, high = wilson(0, runs)
    require(not scenario_setting("faults", "external_reserve"), "faults sets no external_reserve", "it does")
    tdx = f"{sw.n(TDX, UNIFIED, KATA)} / {sw.n(TDX, UNIFIED, VIRT)}"
    snp = f"{sw.n(SNP, UNIFIED, KATA)} / {sw.n(SNP, UNIFIED, VIRT)}"
    return bullet(
        f"**`{UNIFIED}` and `{DRA}` keep every pod's failures inside the race window**: 0 of {runs} runs each",
        f"(95 % interval {100 * low:.0f} to {100 * high:.1f} %). `{UNIFIED}` cuts failed launches on the baselines",
        f"from {sw.n(TDX, BASE, KATA)} / {sw.n(TDX, BASE, VIRT)} to {tdx} (TDX) and from {sw.n(SNP, BASE, KATA)} /",
        f"{sw.n(SNP, BASE, VIRT)} to {snp} (SNP). External VMs are protected only as far as the operator reserves",
        f"keys for them ({sw.pm('faults', UNIFIED, EXT_OUT)} external failures a run outside the window on",
        "`faults`, which sets no `external_reserve`).",
    )


def _claim_stranded(sw: Sweep) -> str:
    u, total = sw.mean(TDX, UNIFIED, STRANDED), key_seconds(TDX)
    require(0 < u < total / 100, "unified strands little but not nothing", f"{u} of {total}")
    ext, surge = "tdx-external-vms", "tdx-kata-surge"
    for s in (ext, surge):
        require(sw.compare(s, UNIFIED, REC, STRANDED) == "less", f"unified strands less than reconciling on {s}", "no")
    return bullet(
        f"**What that costs in stranded keys is small but not zero**: `{UNIFIED}` strands",
        f"{sw.pm(TDX, UNIFIED, STRANDED)} key-s a run on `{TDX}` ({pct(u, total)} % of its {total:,.0f} key-s)",
        f"against `{REC}`'s {sw.pm(TDX, REC, STRANDED)}, and {sw.compare(SNP, UNIFIED, REC, STRANDED)} than",
        f"`{REC}` on SNP ({sw.n(SNP, UNIFIED, STRANDED)} vs {sw.n(SNP, REC, STRANDED)}): each Kata start is hidden",
        "twice until `PodReadyToStartContainers` reaches the plugin (`api_latency`, 1 s). Less than",
        f"`{REC}` where external VMs or surges dominate ({sw.n(ext, UNIFIED, STRANDED)} vs",
        f"{sw.n(ext, REC, STRANDED)} on `{ext}`, {sw.n(surge, UNIFIED, STRANDED)} vs {sw.n(surge, REC, STRANDED)}",
        f"on `{surge}`).",
    )


def dra_against_unified(sw: Sweep) -> dict[str, list[str]]:
    """Scenarios by whether DRA strands more, about as much or less than the unified plugin."""
    found: dict[str, list[str]] = {"more": [], "about as much": [], "less": []}
    for s in sw.scenarios:
        found[sw.compare(s, DRA, UNIFIED, STRANDED)].append(s)
    return found


def _claim_dra(sw: Sweep) -> str:
    found = dra_against_unified(sw)
    require(len(found["more"]) > len(found["less"]), "DRA does not strand less", f"{found}")

    def listed(names: list[str]) -> str:
        return series([f"`{s}` ({sw.n(s, DRA, STRANDED)} vs {sw.n(s, UNIFIED, STRANDED)})" for s in names])

    words = [f"more than `{UNIFIED}` on {listed(found['more'])}"]
    if found["about as much"]:
        words.append(f"about as much on {listed(found['about as much'])}")
    words.append(f"less only on {listed(found['less'])}" if found["less"] else "less on none")
    started = [s for s in sw.scenarios if sw.mean(s, UNSERVED, "launched.kata")]
    require(not started, "unserved DRA starts no Kata pod", f"Kata pods launched on {started}")
    return bullet(
        f"**DRA does *not* strand less** (withdrawn: the shipped-seed tables said so). `{DRA}` strands",
        f"{'; '.join(words)}: its slice reaches the scheduler `api_latency` after each write and it learns which",
        "claims are charged from pod status, as late. **Unserved**, every Kata pod is rejected at admission",
        f"({sw.pm(TDX, UNSERVED, 'admission_failures')} a run on `{TDX}`; no Kata pod started in any scenario):",
        "DRA alone cannot serve Kata today.",
    )


def _claim_restart(sw: Sweep) -> str:
    metric = "rejected_at_kubelet_restart.kata"
    rejecting = sorted(s for s in STRATEGIES if sw.mean("faults", s, metric))
    require(rejecting == sorted([UNIFIED, KOK]), "only overhead on a device-plugin name is rejected", f"{rejecting}")
    vmi = "rejected_at_kubelet_restart.kubevirt"
    vmis = [(s, t) for s in sw.scenarios for t in STRATEGIES if sw.mean(s, t, vmi)]
    kernels = (KERNEL, KERNEL_NO_RESERVE)
    require(all(t in kernels for _, t in vmis), "a kubelet restart rejects no VMI but under the kernel mode", f"{vmis}")
    kernel_vmis = (
        "0 VMIs"
        if not vmis
        else "0 VMIs but under the kernel mode: "
        + series([f"{sw.pm(s, t, vmi)} a run on `{s}` under `{t}`" for s, t in vmis])
        + ", a VMI bound on a key that a VM outside Kubernetes took in the race window, still retrying its launch"
        " when the restarted kubelet re-admits pods against the smaller pool"
    )
    return bullet(
        "**A kubelet restart rejects overhead-only Kata pods** wherever Kata's key is overhead on a device-plugin",
        f"name: {sw.pm('faults', UNIFIED, metric)} running Kata pods a run on `faults` under `{UNIFIED}`,",
        f"{sw.pm('faults', KOK, metric)} under `{KOK}`, their VMs stopped; 0 under every other strategy;",
        f"{kernel_vmis}.",
    )


def _claim_static(sw: Sweep) -> str:
    s, total = sw.mean(TDX, SGR, STRANDED), key_seconds(TDX)
    return bullet(
        f"**Static partitions fail less and strand a lot**: `{SGR}` strands {sw.n(TDX, SGR, STRANDED)} key-s a run",
        f"on `{TDX}` ({pct(s, total)} % of the key-seconds) and still fails outside the window in",
        f"{of_runs(sw, SGR)} runs (when external VMs exceed its reserve); `{SPLIT}` strands",
        f"{sw.n(TDX, SPLIT, STRANDED)} key-s for VMIs there and confines each consumer to half the nodes.",
    )


def _claim_pending(sw: Sweep) -> str:
    metric = "pending_pod_seconds"
    require(sw.compare(TDX, UNIFIED, DRA, metric) == "about as much", "unified and DRA wait alike", "they differ")
    require(sw.compare(TDX, UNIFIED, REC, metric) == "more", "unified waits more than reconciling", "it does not")
    return bullet(
        "**Refusing instead of failing has a price everyone pays alike**: pending pod-seconds are about the same",
        f"for `{UNIFIED}` and `{DRA}` ({sw.n(TDX, UNIFIED, metric)} and {sw.n(TDX, DRA, metric)} on `{TDX}`) and",
        f"higher than for `{REC}` ({sw.n(TDX, REC, metric)}), which lets Kata pods start and fail instead of wait.",
    )


CLAIMS: tuple[Callable[[Sweep], str], ...] = (
    _claim_double_pool,
    _claim_one_pool,
    _claim_reconciling,
    _claim_unified,
    _claim_stranded,
    _claim_dra,
    _claim_restart,
    _claim_static,
    _claim_pending,
)


def block_claims(sw: Sweep) -> str:
    return "What the numbers say (each sentence points at the tables above):\n\n" + "\n".join(c(sw) for c in CLAIMS)


def block_proposal(sw: Sweep) -> str:
    bad, runs = sw.outside_pooled(UNIFIED)
    low, high = wilson(bad, runs)
    worst, where = max((sw.mean(s, UNIFIED, STRANDED_ALL), s) for s in sw.pooled)
    require(bad == 0, "unified-reconciling fails only inside the race window", f"{bad} of {runs}")
    require(worst < 1000, "unified-reconciling strands at most a few hundred key-seconds", f"{worst}")
    return (
        f"Over {len(sw.seeds)} seeds of every bundled scenario but `{APART}` it had no Kata or KubeVirt failure"
        f" outside the race window (0 of {runs} runs, 95 % interval {100 * low:.0f} to {100 * high:.1f} %), a few"
        f" failed launches inside it ({sw.n(TDX, UNIFIED, KATA)} / {sw.n(TDX, UNIFIED, VIRT)} a run on the TDX"
        f" baseline against the double pool's {sw.n(TDX, BASE, KATA)} / {sw.n(TDX, BASE, VIRT)}), and strands at"
        f" most {num(worst)} key-seconds a run (the highest mean of a scenario, `{where}`)."
    )


def block_restart_question(sw: Sweep) -> str:
    return f"({sw.pm('faults', UNIFIED, 'rejected_at_kubelet_restart.kata')} running Kata pods a run on `faults`)"


def stranding(sw: Sweep, strategy: str) -> str:
    """Where ``strategy`` strands keys: nowhere, or each scenario with its mean and how many runs did."""
    where = sw.where(strategy, STRANDED)
    if not where:
        return f"`{strategy}` strands no key in any scenario"
    runs = len(sw.seeds)
    places = [
        f"`{s}` ({sw.pm(s, strategy, STRANDED)} key-s a run, in {sw.runs_stranding(s, strategy)} of {runs} runs)"
        for s in where
    ]
    why = ""
    if "faults" in where:
        # What strands them there is a fact of the scenario and of the KubeVirt it models, not of the numbers.
        why = (
            "; there KubeVirt v1.9.0's TDX plugin does not register again after the kubelet restart, so its"
            " resource stays at 0 and pods requesting it wait on free keys until virt-handler restarts"
            " (kubevirt/kubevirt#17122)"
        )
    return f"`{strategy}` strands keys only on {series(places)}{why}"


def block_alternative(sw: Sweep) -> str:
    s, total = sw.mean(TDX, SGR, STRANDED), key_seconds(TDX)
    return (
        f"Its cost, from the same sweep: with the headroom (`{SGR}`) {pct(s, total)} % of the key-seconds stranded"
        f" on `{TDX}` ({sw.pm(TDX, SGR, STRANDED)} key-s a run) and failures outside the window in"
        f" {of_runs(sw, SGR)} runs whenever outside use exceeds the headroom; without it, failures outside the"
        f" window in {of_runs(sw, NFD)} (`{NFD}`) and {of_runs(sw, KOK)} (`{KOK}`) runs; what they strand:"
        f" {stranding(sw, NFD)}; {stranding(sw, KOK)}."
    )


def block_dra_move(sw: Sweep) -> str:
    bad, runs = sw.outside_pooled(DRA)
    more = dra_against_unified(sw)["more"]
    return para(
        f"Move to a DRA driver (`{DRA}`: {bad} of {runs} runs outside the window) once Kubernetes decides that",
        "RuntimeClass overhead can be served from a DRA-backed extended resource; until then DRA rejects every",
        f"Kata pod (`{UNSERVED}`), and it strands more than the unified plugin in {len(more)} of",
        f"{len(sw.scenarios)} scenarios.",
    )


def _cells(sw: Sweep, scenario: str, strategy: str, metrics: tuple[str, ...]) -> str:
    return " / ".join(sw.n(scenario, strategy, m) for m in metrics)


def _row(sw: Sweep, label: str, choose: str, strategy: str, scenario: str) -> str:
    launches, outside = _cells(sw, scenario, strategy, (KATA, VIRT, EXT)), _cells(sw, scenario, strategy, OUT)
    stranded = sw.n(scenario, strategy, STRANDED)
    return f"| {label} | {choose} | `{strategy}` (`{scenario}`) | {launches} | {outside} | {stranded} |"


SPLIT_CHOICE = "`nfd` on Kata nodes, `kubevirt` on VM nodes"


def block_key_pools(sw: Sweep) -> str:
    ext, first, last = "tdx-external-vms", sw.seeds[0], sw.seeds[-1]
    intro = para(
        f"Measurements come from the simulator: the sweep of all {len(sw.scenarios)} bundled scenarios in",
        "[simulator.md](simulator.md#results-every-bundled-scenario-30-seeds)",
        f"(`teesim sweep ... --seeds {first}-{last}`;",
        "this table and the paragraph after it are written by `benchmarks/sweep_docs.py` from its `sweep.json`),",
        f"means a run over seeds {first} to {last}, where the full tables, the 95 % intervals and what each column",
        "means are. Each row names the strategy that models the topology. Failed launches are guests whose key",
        'charge failed, retries included (Kata/KubeVirt/external); "outside the race window" are the failures a',
        "usage-aware advertiser should never have; stranded key-seconds are keys free in the kernel that the",
        "scheduler would not give a new VMI.",
    )
    launches = f"{_cells(sw, ext, BASE, (KATA, VIRT, EXT))} vs {_cells(sw, ext, UNIFIED, (KATA, VIRT, EXT))}"
    outside = f"{_cells(sw, ext, BASE, OUT)} vs {_cells(sw, ext, UNIFIED, OUT)}"
    stranded = f"{sw.n(ext, BASE, STRANDED)} vs {sw.n(ext, UNIFIED, STRANDED)}"
    headroom = "`kubevirt`/`nfd` (neither sees those keys): keep headroom (`tee_capacity_check min_free`)"
    rows = [
        "| topology | choose | teesim strategy (scenario) | failed launches k/v/e | outside race window k/v/e"
        " | stranded key-s |",
        "|---|---|---|---|---|---|",
        _row(sw, "Kata and KubeVirt on the same node, chart defaults (what is refused)", "-", BASE, TDX),
        _row(sw, "same, SNP", "-", BASE, SNP),
        _row(sw, "TDX, Kata and KubeVirt on the same nodes", "`kubevirt`", KOK, TDX),
        _row(sw, "Kata nodes and KubeVirt nodes kept apart (TDX)", SPLIT_CHOICE, SPLIT, TDX),
        _row(sw, "SNP, Kata and KubeVirt: split the nodes", SPLIT_CHOICE, SPLIT, SNP),
        f"| VMs started outside Kubernetes on the node as well | {headroom} | `{BASE}` vs `{UNIFIED}` (`{ext}`)"
        f" | {launches} | {outside} | {stranded} |",
        _row(sw, "Kata, KubeVirt and VMs outside Kubernetes on the same TDX nodes", "`kernel`", KERNEL, TDX),
        _row(sw, "same, SNP", "`kernel`", KERNEL, SNP),
        _row(sw, "same, with many VMs outside Kubernetes", "`kernel` (`--reserve` for them)", KERNEL, ext),
        _row(sw, "SNP with ciphertext hiding", "`kernel`", KERNEL, APART),
    ]
    return intro + "\n\n" + "\n".join(rows) + "\n\n" + _key_pools_claims(sw)


def _cut(sw: Sweep, scenario: str, strategy: str) -> float:
    base = sw.mean(scenario, BASE, KATA) + sw.mean(scenario, BASE, VIRT)
    return 100 * (1 - (sw.mean(scenario, strategy, KATA) + sw.mean(scenario, strategy, VIRT)) / base)


def _key_pools_claims(sw: Sweep) -> str:
    tdx_cut, snp_cut = _cut(sw, TDX, KOK), _cut(sw, SNP, KOK)
    require(tdx_cut > 90, "`kubevirt` mode cuts the TDX baseline's failures by more than 90 %", f"{tdx_cut:.1f} %")
    for s in (TDX, SNP):
        require(sw.mean(s, SPLIT, KATA) == 0, f"split nodes remove Kata's failures on {s}", "Kata failures")
        require(sw.mean(s, SPLIT, VIRT) > 0, f"split nodes still fail VMIs on {s}", "none")
    restart = sw.n("faults", KOK, "rejected_at_kubelet_restart.kata")
    return para(
        "What the numbers say for this collection's modes: `kubevirt` (Kata's overhead on KubeVirt's resource)",
        f"cuts the TDX baseline's failed launches by {tdx_cut:.0f} % (on SNP by {snp_cut:.0f} %: SEV-ES VMIs",
        f"charge ESIDs and request none); {stranding(sw, KOK)}. What remains comes from VMs outside Kubernetes and",
        "from Kata sandboxes and VMIs retried. A kubelet restart rejects running Kata pods in that mode (their key",
        f"is overhead on a device-plugin name: {restart} a run on `faults`). Splitting the nodes removes Kata's",
        f"failures on the baselines but strands keys ({sw.n(TDX, SPLIT, STRANDED)} key-seconds a run on TDX,",
        f"{sw.n(SNP, SPLIT, STRANDED)} on SNP), and still fails VMIs on the VM nodes ({sw.n(TDX, SPLIT, VIRT)} a",
        f"run on TDX, {sw.n(SNP, SPLIT, VIRT)} on SNP, where SEV-ES VMIs charge ESIDs and request none): the price",
        "of two fixed pools.",
    )


KERNEL_COMPARED = (KERNEL, KERNEL_NO_RESERVE, UNIFIED, KOK, BASE)
OVER_HEADROOM = "external_over_headroom"


def block_kernel_pool(sw: Sweep) -> str:
    """The deployable kernel mode beside the double pool, the static one pool and the unified plugin."""
    rows = [
        "| scenario | strategy | runs failing outside the window: Kata or KubeVirt / external | failed launches"
        " inside the window a run | outside VMs over their headroom a run | stranded key-s a run |",
        "|---|---|---|---|---|---|",
    ]
    for scenario in sw.scenarios:
        for strategy in KERNEL_COMPARED:
            bad, runs = sw.outside(scenario, strategy)
            ext = sw.external_outside(scenario, strategy)
            rows.append(
                f"| `{scenario}` | `{strategy}` | {bad}/{runs} / {ext}/{runs} | {sw.in_window(scenario, strategy)}"
                f" | {sw.pm(scenario, strategy, OVER_HEADROOM)} | {sw.pm(scenario, strategy, STRANDED)} |"
            )
    pods = sum(sw.outside(s, KERNEL)[0] for s in sw.scenarios)
    runs = len(sw.scenarios) * len(sw.seeds)
    external = sum(sw.external_outside(s, KERNEL) for s in sw.scenarios)
    require(pods == 0, "kernel-pool fails no Kata or KubeVirt launch outside the race window", f"{pods} of {runs}")
    require(external == 0, "kernel-pool fails no VM outside Kubernetes within its headroom", f"{external} of {runs}")
    _low, high = wilson(0, runs)
    over = sw.where(KERNEL, OVER_HEADROOM)
    bare = [s for s in sw.scenarios if sw.external_outside(s, KERNEL_NO_RESERVE)]
    headroom = para(
        "A VM started outside Kubernetes counts as failed outside the window when it found no key while the VMs",
        "outside Kubernetes on its node held less than the node's declared headroom (the scenario's `reserved`,",
        "`kernel_key_pool_reserve` when deployed): the pool promised it that key. One that starts beyond the headroom",
        "while pods hold every other key fails in every strategy (no pool can free a key without stopping a running",
        "guest); those are counted apart, `over their headroom`, "
        + (series([f"{sw.pm(s, KERNEL, OVER_HEADROOM)} a run on `{s}`" for s in over]) if over else "none here")
        + f" for `{KERNEL}`. Without the reserve (`{KERNEL_NO_RESERVE}`, the role's default `{{}}`), VMs outside",
        "Kubernetes failed within their headroom in "
        + (
            series([f"{sw.external_outside(s, KERNEL_NO_RESERVE)} of {len(sw.seeds)} runs of `{s}`" for s in bare])
            if bare
            else "no run"
        )
        + ": set the reserve wherever VMs run outside Kubernetes. The headroom is held free while they do not use it,"
        " in the stranded key-seconds below. The strategies side by side, from the same sweep, per scenario (mean ±"
        " 95 % interval half-width):",
    )
    intro = para(
        f"`{KERNEL}` is `tee_key_pool_mode: kernel` as docs/key-pools.md deploys it: teesim runs the node agent's own",
        "decision code (`plugins/module_utils/agent/decision.py`) in process with the node's headroom as its",
        "`--reserve`, polling every second (the deployed default is 0.5 s) and reaching the scheduler one API latency",
        f"later. Over {len(sw.seeds)} seeds of all {len(sw.scenarios)} bundled scenarios ({runs} runs, `{APART}`",
        "included) it had no failure outside the race window, Kata, KubeVirt or VMs outside Kubernetes within their",
        f"headroom (95 % interval 0 to {100 * high:.1f} %).",
    )
    return intro + "\n\n" + headroom + "\n\n" + "\n".join(rows)


# name -> (renderer, whether the block is whole lines (True) or part of a paragraph)
BLOCKS: dict[str, tuple[Callable[[Sweep], str], bool]] = {
    "scope": (block_scope, False),
    "results-intro": (block_results_intro, True),
    "tables": (block_tables, True),
    "ciphertext-hiding": (block_apart, True),
    "claims": (block_claims, True),
    "proposal": (block_proposal, False),
    "restart-question": (block_restart_question, False),
    "alternative": (block_alternative, False),
    "dra-move": (block_dra_move, True),
    "key-pools": (block_key_pools, True),
    "kernel-pool": (block_kernel_pool, True),
}
MARKER = re.compile(r"<!-- sweep-docs:([a-z-]+) -->(.*?)<!-- /sweep-docs:\1 -->", re.DOTALL)


def render(report: dict[str, Any]) -> dict[str, str]:
    """Every block's text (between its markers) from one sweep report."""
    sw = Sweep(report)
    sw.check_coverage()
    return {name: (f"\n{fn(sw)}\n" if whole else fn(sw)) for name, (fn, whole) in BLOCKS.items()}


def fill(text: str, blocks: dict[str, str], where: str) -> tuple[str, set[str]]:
    """``text`` with every marked block replaced; the names it placed."""
    placed: set[str] = set()

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in blocks:
            raise ClaimBroken(f"{where}: unknown block sweep-docs:{name} (known: {', '.join(sorted(blocks))})")
        placed.add(name)
        return f"<!-- sweep-docs:{name} -->{blocks[name]}<!-- /sweep-docs:{name} -->"

    return MARKER.sub(replace, text), placed


def update(root: Path, blocks: dict[str, str], write: bool) -> list[str]:
    """Fill the blocks of every doc file; the diffs of the files that differ (written when ``write``)."""
    diffs: list[str] = []
    placed: set[str] = set()
    for name in DOC_FILES:
        path = root / name
        old = path.read_text(encoding="utf-8")
        new, found = fill(old, blocks, name)
        placed |= found
        if new != old:
            diffs.append("".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), name, name)))
            if write:
                path.write_text(new, encoding="utf-8")
    missing = sorted(set(blocks) - placed)
    if missing:
        raise ClaimBroken(f"blocks placed in none of {', '.join(DOC_FILES)}: {', '.join(missing)}")
    return diffs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep", help="sweep.json of the docs' sweep (see sweep_command())")
    parser.add_argument(
        "--write", action="store_true", help="rewrite the blocks (default: check them, exit 1 on a difference)"
    )
    parser.add_argument("--root", default=str(REPO), help="the checkout whose docs to check (default: this one)")
    args = parser.parse_args(argv)
    try:
        blocks = render(json.loads(Path(args.sweep).read_text(encoding="utf-8")))
        diffs = update(Path(args.root), blocks, args.write)
    except ClaimBroken as exc:
        print(f"sweep_docs: {exc}", file=sys.stderr)
        return 2
    if args.write:
        print(f"sweep_docs: {len(diffs)} file(s) rewritten", file=sys.stderr)
        return 0
    sys.stdout.write("".join(diffs))
    if diffs:
        print("sweep_docs: the docs differ from the sweep; run with --write", file=sys.stderr)
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
