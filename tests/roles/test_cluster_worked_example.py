"""docs/cluster.md's worked example (a TDX node and an SNP node) through the real ansible-playbook: the plan it prints
and the refusal of a double pool are what the guide shows."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow

NODES = {
    "tdx-1": {"vendor": "intel", "qgs": True, "tee_node_consumers": ["kata", "kubevirt"]},
    "snp-1": {"vendor": "amd", "tee_node_consumers": ["kata"]},
}


def test_the_plan_is_what_the_guide_shows(render, check_worked_output):
    proc, files = render(NODES)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-3000:]
    check_worked_output("cluster plan", proc.stdout)
    check_worked_output("cluster manifests", "$ ls cluster-manifests/\n" + "\n".join(files))


def test_a_double_pool_is_refused_as_the_guide_shows(render, check_worked_output):
    proc, _ = render({**NODES, "tdx-1": {**NODES["tdx-1"], "tee_key_pool_mode": "nfd"}})
    assert proc.returncode != 0
    check_worked_output("cluster double pool", proc.stdout + proc.stderr)
