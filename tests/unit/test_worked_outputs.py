"""Every worked output in README.md and docs/ has a test that runs the command it shows and compares."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# worked output -> the test file that produces and compares it (check_worked_output("<key>", ...)).
PRODUCED_BY = {
    "make demo": "tests/demo/test_demo.py",
    "make fleet-report": "tests/integration/test_make_fleet_report.py",
    "fleet report nodes": "tests/integration/test_make_fleet_report.py",
    "preflight table": "tests/integration/test_make_fleet_report.py",
    "cluster plan": "tests/roles/test_cluster_worked_example.py",
    "cluster manifests": "tests/roles/test_cluster_worked_example.py",
    "cluster double pool": "tests/roles/test_cluster_worked_example.py",
    "teesim run --real-node": "tests/node/test_real_node_run.py",
    "teesim run --real-node --strategy kernel-pool": "tests/node/test_real_node_run.py",
}


def test_every_worked_output_is_compared_by_the_test_that_produces_it(docs_worked_outputs):
    assert set(docs_worked_outputs) == set(PRODUCED_BY)
    for key, test_file in PRODUCED_BY.items():
        text = (REPO / test_file).read_text()
        assert "check_worked_output(" in text and f'"{key}"' in text, f"{test_file} does not compare {key!r}"
        path, lines = docs_worked_outputs[key]
        assert [line for line in lines if line.strip() not in ("", "...")], f"{path.name}: {key!r} is empty"


def test_the_comparison_fails_on_a_line_the_command_did_not_print(check_worked_output, docs_worked_outputs):
    import pytest

    _, lines = docs_worked_outputs["make demo"]
    printed = "\n".join(lines).replace("...", "")
    check_worked_output("make demo", printed)
    with pytest.raises(pytest.fail.Exception, match="no longer prints"):
        check_worked_output("make demo", printed.replace("capacity 63", "capacity 64"))
    with pytest.raises(pytest.fail.Exception, match="no longer prints"):  # order matters
        check_worked_output("make demo", "\n".join(reversed(printed.splitlines())))
