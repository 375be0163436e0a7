"""The agent's loop against a real HTTPS server on loopback: writes on change only, and every fault shrinks the pool."""

from __future__ import annotations

import pytest
from ansible_collections.confidential.tee.plugins.module_utils.agent import decision, kube
from ansible_collections.confidential.tee.plugins.module_utils.agent.agent import REPEAT_EVERY, Agent
from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import HostReader

from .conftest import host_tree

KEYS = "tdx.intel.com/keys"


def kata_pod(name: str, node: str = "n1", started: bool = True) -> dict:
    return {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeName": node, "overhead": {KEYS: "1"}, "containers": [{"name": "c"}]},
        "status": {
            "phase": "Running" if started else "Pending",
            "conditions": [{"type": decision.SANDBOX_CONDITION, "status": "True" if started else "False"}],
        },
    }


def make_agent(api_and_config, root, **options) -> Agent:
    _api, config = api_and_config
    client = kube.KubeClient(kube.from_kubeconfig(str(config)))
    agent = Agent("n1", HostReader(str(root)), client, **options)
    agent.refresh_node(force=True)
    return agent


def patches_of(api) -> int:
    return sum(1 for r in api.requests if r[0] == "PATCH")


def test_writes_the_pool_once_and_again_only_on_change(fake_api, tmp_path):
    api, _ = fake_api
    root = host_tree(tmp_path, "tdx 63\n", "tdx 5\n")  # 2 Kata pods running, 3 keys held outside Kubernetes
    api.pods = [kata_pod("a"), kata_pod("b"), kata_pod("c", started=False), kata_pod("x", node="n2")]
    agent = make_agent(fake_api, root)
    first = agent.step()
    assert first.written and api.pool() == ("60", "60")
    assert api.condition()["status"] == "True" and api.condition()["reason"] == decision.REASON_OK
    assert ("PATCH", "/api/v1/nodes/n1/status", kube.STRATEGIC_MERGE) in api.requests
    assert any(r[2] == "fieldSelector=spec.nodeName%3Dn1" for r in api.requests if r[1] == "/api/v1/pods")
    agent.step()
    assert patches_of(api) == 1  # nothing changed: nothing written
    host_tree(tmp_path, "tdx 63\n", "tdx 6\n")  # an external VM takes a key
    agent.step()
    assert api.pool() == ("59", "59") and patches_of(api) == 2
    # A Kata pod starts: usage and Kubernetes' share rise together, the pool stays.
    api.pods[2] = kata_pod("c")
    host_tree(tmp_path, "tdx 63\n", "tdx 7\n")
    agent.step()
    assert patches_of(api) == 2 and api.pool() == ("59", "59")
    assert [c["type"] for c in api.node["status"]["conditions"]] == ["Ready", decision.CONDITION_TYPE]


def test_dry_run_writes_nothing(fake_api, tmp_path):
    api, _ = fake_api
    agent = make_agent(fake_api, host_tree(tmp_path), dry_run=True)
    assert agent.step().values() == {KEYS: 63}
    assert patches_of(api) == 0 and api.pool() == (None, None)


def test_api_down_then_back(fake_api, tmp_path, caplog):
    api, _ = fake_api
    agent = make_agent(fake_api, host_tree(tmp_path, "tdx 10\n", "tdx 1\n"))
    api.down = True
    found = agent.step()
    assert not found.written and "unreachable" in found.error
    assert found.values() == {KEYS: 9}  # no pod list: every used key is external
    assert "cannot patch Node n1 status" in caplog.text
    api.down = False
    agent.step()
    assert api.pool() == ("9", "9") and api.condition()["reason"] == decision.REASON_OK


def test_an_outage_is_logged_when_it_starts_and_then_once_per_repeat_interval(fake_api, tmp_path, caplog):
    api, _ = fake_api
    now = [0.0]
    agent = make_agent(fake_api, host_tree(tmp_path, "tdx 10\n", "tdx 1\n"), clock=lambda: now[0], resync=0.0)
    api.down = True
    caplog.clear()
    for _ in range(50):  # 50 passes, 25 s of a 0.5 s interval
        now[0] += 0.5
        agent.step()
    assert caplog.text.count("cannot patch Node n1 status") == 1
    assert caplog.text.count("cannot read Node n1") == 1
    now[0] += REPEAT_EVERY
    agent.step()
    assert caplog.text.count("cannot patch Node n1 status") == 2  # still down: said again, once
    api.down = False
    agent.step()
    assert api.pool() == ("9", "9")
    api.down = True
    now[0] += 0.5
    agent.step()
    assert caplog.text.count("cannot patch Node n1 status") == 3  # a new outage after a write is news


def test_pod_list_refused_counts_every_key_as_external(fake_api, tmp_path):
    api, _ = fake_api
    api.pods = [kata_pod("a"), kata_pod("b")]
    agent = make_agent(fake_api, host_tree(tmp_path, "tdx 10\n", "tdx 3\n"))
    agent.step()
    assert api.pool() == ("9", "9")
    api.pods_status = 403
    found = agent.step()
    assert api.pool() == ("7", "7") and found.condition["reason"] == decision.REASON_PODS_UNKNOWN
    assert api.condition()["status"] == "False" and "HTTP 403" in api.condition()["message"]
    assert [e["reason"] for e in api.events] == [decision.REASON_OK, decision.REASON_PODS_UNKNOWN]
    assert api.events[-1]["type"] == "Warning" and api.events[-1]["involvedObject"]["kind"] == "Node"
    # While in doubt the pool never grows, even when the kernel frees keys.
    host_tree(tmp_path, "tdx 10\n", "tdx 0\n")
    agent.step()
    assert api.pool() == ("7", "7")


@pytest.mark.parametrize(
    "capacity, current, reason",
    [
        ("tdx 63\n", "tdx lots\n", decision.REASON_CURRENT_UNKNOWN),
        ("tdx -1\n", "tdx 0\n", decision.REASON_CAPACITY_UNKNOWN),
        ("tdx 63\n\x00", "tdx 0\n", decision.REASON_CAPACITY_UNKNOWN),
    ],
)
def test_malformed_misc_files_empty_the_pool(fake_api, tmp_path, capacity, current, reason):
    api, _ = fake_api
    agent = make_agent(fake_api, host_tree(tmp_path))
    agent.step()
    assert api.pool() == ("63", "63")
    host_tree(tmp_path, capacity, current)
    found = agent.step()
    assert api.pool() == ("0", "0") and found.condition["reason"] == reason


def test_unreadable_usage_file_empties_the_pool(fake_api, tmp_path):
    api, _ = fake_api
    root = host_tree(tmp_path, "tdx 63\n", None)
    (root / "sys/fs/cgroup/misc.current").mkdir()  # not a regular file: unreadable, never opened
    agent = make_agent(fake_api, root)
    found = agent.step()
    assert found.values() == {KEYS: 0} and api.condition()["reason"] == decision.REASON_CURRENT_UNKNOWN


def test_no_misc_controller_advertises_nothing_and_does_not_flap(fake_api, tmp_path):
    api, _ = fake_api
    (tmp_path / "sys/fs/cgroup").mkdir(parents=True)
    agent = make_agent(fake_api, tmp_path)
    for _ in range(3):
        found = agent.step()
    assert found.decisions == [] and api.pool() == (None, None)
    assert api.condition()["reason"] == decision.REASON_NO_MISC and patches_of(api) == 1


def test_a_misc_controller_that_disappears_empties_what_was_advertised(fake_api, tmp_path):
    api, _ = fake_api
    root = host_tree(tmp_path, "tdx 8\n", "tdx 0\n")
    agent = make_agent(fake_api, root)
    agent.step()
    assert api.pool() == ("8", "8")
    for name in ("misc.capacity", "misc.current"):
        (root / "sys/fs/cgroup" / name).unlink()
    found = agent.step()
    assert api.pool() == ("0", "0") and found.condition["reason"] == decision.REASON_NO_MISC


def test_a_host_without_tee_keys_says_so(fake_api, tmp_path):
    api, _ = fake_api
    agent = make_agent(fake_api, host_tree(tmp_path, "", ""))
    agent.step()
    agent.step()
    assert api.pool() == (None, None) and api.condition()["reason"] == decision.REASON_NO_RESOURCE
    assert patches_of(api) == 1


def test_usage_going_backwards_and_a_bios_split(fake_api, tmp_path):
    api, _ = fake_api
    api.pods = [kata_pod("a"), kata_pod("b"), kata_pod("c")]
    agent = make_agent(fake_api, host_tree(tmp_path, "tdx 63\n", "tdx 1\n"))
    agent.step()  # the kernel already released two pods' keys: no negative external, nothing extra hidden
    assert api.pool() == ("63", "63")
    host_tree(tmp_path, "tdx 31\n", "tdx 3\n")  # capacity halved (BIOS split between TDX and legacy keys)
    agent.step()
    assert api.pool() == ("31", "31")
    host_tree(tmp_path, "tdx 2\n", "tdx 3\n")  # capacity below usage: a doubt; the 3 running pods leave 0 free
    found = agent.step()
    assert api.pool() == ("3", "3") and found.condition["reason"] == decision.REASON_OVER_CAPACITY


def test_old_kernel_without_root_usage_is_a_doubt(fake_api, tmp_path):
    _api, _ = fake_api
    root = host_tree(tmp_path, "tdx 63\n", None)
    child = root / "sys/fs/cgroup/machine.slice"
    child.mkdir()
    (child / "misc.current").write_text("tdx 4\n")
    agent = make_agent(fake_api, root)
    found = agent.step()
    assert found.values() == {KEYS: 59} and found.condition["reason"] == "UsageLowerBound"


def test_patch_applied_but_answer_lost_is_not_written_twice(fake_api, tmp_path):
    api, _ = fake_api
    agent = make_agent(fake_api, host_tree(tmp_path, "tdx 63\n", "tdx 3\n"))
    api.drop_patch = True
    assert agent.step().error
    assert api.pool() == ("60", "60")
    agent.step()  # reads the Node again first: it already holds the value
    assert patches_of(api) == 1


def test_a_new_agent_continues_from_what_the_node_holds(fake_api, tmp_path):
    api, _ = fake_api
    make_agent(fake_api, host_tree(tmp_path, "tdx 63\n", "tdx 3\n")).step()
    api.pods_status = 500
    restarted = make_agent(fake_api, host_tree(tmp_path, "tdx 63\n", "tdx 0\n"))
    restarted.step()  # in doubt at start: the value it found on the Node is the ceiling
    assert api.pool() == ("60", "60")


def test_two_agents_on_one_node_agree_and_never_grow_the_pool(fake_api, tmp_path):
    api, _ = fake_api
    root = host_tree(tmp_path, "tdx 63\n", "tdx 0\n")
    first, second = make_agent(fake_api, root), make_agent(fake_api, root)
    for current in (0, 4, 9, 2, 2):
        host_tree(tmp_path, "tdx 63\n", f"tdx {current}\n")
        for agent in (first, second):
            agent.step()
            assert int(api.pool()[1]) <= 63 - current
        assert api.pool() == (str(63 - current),) * 2
    # A write from an older reading (the other agent) is corrected at the next resync.
    api.apply({"status": {"capacity": {KEYS: "63"}, "allocatable": {KEYS: "63"}}})
    first.seen_at = float("-inf")
    first.step()
    assert api.pool() == ("61", "61")


@pytest.mark.parametrize("param, pool, reason", [("16\n", 12, decision.REASON_OK), ("max\n", 0, "SnpRangeUnknown")])
def test_ciphertext_hiding_gives_snp_the_snp_range(fake_api, tmp_path, param, pool, reason):
    api, _ = fake_api
    root = host_tree(tmp_path, "sev 410\nsev_es 99\n", "sev 0\nsev_es 4\n")
    params = root / "sys/module/kvm_amd/parameters"
    params.mkdir(parents=True)
    (params / "ciphertext_hiding_asids").write_text(param)
    found = make_agent(fake_api, root).step()
    assert found.values() == {"sev-snp.amd.com/esids": pool} and found.condition["reason"] == reason
    assert api.pool("sev-snp.amd.com/esids") == (str(pool), str(pool))
