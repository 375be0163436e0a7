"""The simulator's results in the docs are the sweep the docs name: tables and the sentences about them.

The slow test runs the sweep command written in docs/simulator.md (every bundled scenario, every strategy,
seeds 1-30) and ``benchmarks/sweep_docs.py``'s check on the checkout's docs: any number or comparison that
no longer matches the model fails here, with the diff to apply (``--write``).
"""

from __future__ import annotations

import copy
import importlib.util
import json
import re
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest
from teesim.cli import main as teesim

REPO = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("sweep_docs", REPO / "benchmarks" / "sweep_docs.py")
assert _spec and _spec.loader
sweep_docs = importlib.util.module_from_spec(_spec)
sys.modules["sweep_docs"] = sweep_docs
_spec.loader.exec_module(sweep_docs)


def _docs_commands() -> list[str]:
    """The console lines of the results section's block, as the docs show them."""
    text = (REPO / "docs" / "simulator.md").read_text(encoding="utf-8")
    block = re.search(r"<!-- sweep-docs:results-intro -->(.*?)<!-- /sweep-docs:results-intro -->", text, re.DOTALL)
    assert block, "docs/simulator.md lost its results-intro block"
    return [line[2:] for line in block.group(1).splitlines() if line.startswith("$ ")]


@pytest.fixture(scope="module")
def docs_sweep(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The docs' own sweep, run as the docs write it (about 100 CPU s native, twice that from source)."""
    sweep_line, _ = _docs_commands()
    argv = shlex.split(sweep_line)
    assert argv[0] == "teesim" and "--out" in argv
    out = tmp_path_factory.mktemp("docs-sweep")
    argv[argv.index("--out") + 1] = str(out)
    assert teesim([*argv[1:], "--quiet"]) == 0
    return json.loads((out / "sweep.json").read_text(encoding="utf-8"))


def test_the_docs_name_the_sweep_of_every_bundled_scenario() -> None:
    sweep_line, write_line = _docs_commands()
    assert sweep_line == sweep_docs.sweep_command()
    assert write_line == "python benchmarks/sweep_docs.py report/sweep/sweep.json --write"


@pytest.mark.slow
def test_every_generated_block_is_what_the_sweep_says(docs_sweep: dict[str, Any], tmp_path: Path) -> None:
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps(docs_sweep), encoding="utf-8")
    assert sweep_docs.main([str(path)]) == 0, "the docs differ from their sweep: see the diff above"


@pytest.mark.slow
def test_a_sentence_follows_its_numbers(docs_sweep: dict[str, Any]) -> None:
    """The "without headroom" sentence lists where each pool strands keys: one more place shows up in it."""
    changed = copy.deepcopy(docs_sweep)
    summary = changed["results"]["quick"]["nfd-shared"]["stranded_key_seconds"]
    summary.update(mean=12.5, ci95=[10.0, 15.0])
    for run in changed["runs"]:
        if run["scenario"] == "quick" and run["strategy"] == "nfd-shared":
            run["metrics"]["stranded_key_seconds"] = 12.5
    before, after = sweep_docs.render(docs_sweep)["alternative"], sweep_docs.render(changed)["alternative"]
    assert "`nfd-shared` strands no key in any scenario" in before
    assert "`nfd-shared` strands keys only on `quick` (12.5 ± 2.5 key-s a run, in 30 of 30 runs)" in after


@pytest.mark.slow
def test_a_sentence_whose_point_the_data_denies_is_refused(docs_sweep: dict[str, Any]) -> None:
    changed = copy.deepcopy(docs_sweep)
    for run in changed["runs"]:
        if run["scenario"] == "quick" and run["strategy"] == "unified-reconciling" and run["seed"] == 1:
            run["metrics"]["failed_outside_race_window"]["kata"] = 1
    with pytest.raises(sweep_docs.ClaimBroken, match="unified"):
        sweep_docs.render(changed)


def _report(scenarios: list[str], seeds: list[int]) -> dict[str, Any]:
    return {
        "sweep": {"scenarios": scenarios, "seeds": seeds, "strategies": list(sweep_docs.STRATEGIES)},
        "results": {},
        "runs": [],
    }


def test_a_sweep_of_fewer_seeds_or_scenarios_is_refused() -> None:
    every = sorted(sweep_docs.bundled_scenarios())
    with pytest.raises(sweep_docs.ClaimBroken, match="every bundled scenario"):
        sweep_docs.render(_report(every[1:], list(range(1, 31))))
    with pytest.raises(sweep_docs.ClaimBroken, match=">= 30 seeds"):
        sweep_docs.render(_report(every, list(range(1, 30))))


def test_unknown_and_unplaced_blocks_are_errors(tmp_path: Path) -> None:
    blocks = {name: f"text of {name}" for name in sweep_docs.BLOCKS}
    text = "a <!-- sweep-docs:tables -->old<!-- /sweep-docs:tables --> b"
    filled, placed = sweep_docs.fill(text, blocks, "doc.md")
    assert filled == "a <!-- sweep-docs:tables -->text of tables<!-- /sweep-docs:tables --> b" and placed == {"tables"}
    with pytest.raises(sweep_docs.ClaimBroken, match="unknown block sweep-docs:nope"):
        sweep_docs.fill("<!-- sweep-docs:nope -->x<!-- /sweep-docs:nope -->", blocks, "doc.md")
    for name in sweep_docs.DOC_FILES:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    with pytest.raises(sweep_docs.ClaimBroken, match="placed in none"):
        sweep_docs.update(tmp_path, blocks, write=False)
