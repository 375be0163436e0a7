"""scripts/real_node_run.py without a node: the pods it creates and how it reads a run back (the real run is
tests/node/test_real_node_run.py)."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from types import SimpleNamespace

import real_node_run
from teesim.cluster.pods import Consumer
from teesim.cluster.workload import Arrival
from teesim.report import real_node
from teesim.sim.scenario import load_scenario
from teesim.sim.simulation import Settings

BEGAN = datetime.datetime(2026, 12, 2, 8, 0, 0, tzinfo=datetime.UTC)
SMALL = Path(__file__).resolve().parents[1] / "node" / "real-node-small.yaml"


def fake_node(workdir: Path) -> SimpleNamespace:
    (workdir / "root/sys/fs/cgroup").mkdir(parents=True)
    (workdir / "root/sys/fs/cgroup/misc.current").write_text("tdx 2\n")
    logs = {}
    return SimpleNamespace(
        workdir=workdir,
        root=workdir / "root",
        kernel_socket=workdir / "kernel/kernel.sock",
        build={"images": {"guest": "localhost/teesim/guest:1"}},
        log_tail=lambda name: logs.get(name, ""),
        logs=logs,
    )


def pod_item(name: str, consumer: str, bound: str | None, reason: str = "") -> dict:
    conditions = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": bound}] if bound else []
    status = {"conditions": conditions, **({"reason": reason} if reason else {})}
    meta = {"name": name, "namespace": real_node_run.NAMESPACE, "uid": f"uid-{name}", "labels": {}}
    meta["labels"]["teesim.dev/consumer"] = consumer
    return {"metadata": meta, "spec": {"nodeName": "n"} if bound else {}, "status": status}


def write_log(node: SimpleNamespace, name: str, container: str, lines: list[str]) -> None:
    directory = node.workdir / "pod-logs" / f"{real_node_run.NAMESPACE}_{name}_uid-{name}" / container
    directory.mkdir(parents=True)
    (directory / "0.log").write_text("".join(f"{line}\n" for line in lines))


def test_a_run_is_read_back_from_the_api_the_guests_logs_and_the_vms_answers(tmp_path) -> None:
    node = fake_node(tmp_path)
    refused = "stderr F teesim-guest: launch of tdx 1 failed: ENOSPC: no free TDX KeyID"
    charged = "stdout F teesim-guest: tdx 1 charged to /kubepods/x; running"
    stamps = ("2026-12-02T08:00:10.5Z", "2026-12-02T08:00:11.0Z", "2026-12-02T08:00:20.2Z")
    write_log(
        node,
        "kubevirt-00002",
        "compute",
        [f"{t} {m}" for t, m in zip(stamps, (refused, refused, charged), strict=True)],
    )
    write_log(node, "kata-00001", "workload", [f"2026-12-02T08:00:04.0Z {charged}"])
    items = [
        pod_item("kata-00001", "kata", "2026-12-02T08:00:03Z"),
        pod_item("kubevirt-00002", "kubevirt", "2026-12-02T08:00:09Z"),
        pod_item("kubevirt-00003", "kubevirt", None),
        pod_item("kata-00004", "kata", "2026-12-02T08:00:30Z", reason="OutOftdx.intel.com/keys"),
    ]
    plane = SimpleNamespace(kubectl=lambda *args: SimpleNamespace(stdout=json.dumps({"items": items})))
    node.logs.update({"external-00000": "ok /machine/x\n", "external-00005": "error ENOSPC no free TDX KeyID\n"})
    plan = real_node.plan(load_scenario(str(SMALL)), None, None)
    out = real_node_run.observe(plane, node, plan, ["external-00000", "external-00005"], real_node_run.Clock(BEGAN, 2))
    assert out["started"] == {"kata": 1, "kubevirt": 1, "external": 1}
    assert out["failed_launch"] == {"kata": 0, "kubevirt": 1, "external": 1}
    assert out["launch_errors"] == {"external": {"ENOSPC": 1}, "kubevirt": {"ENOSPC": 1}}  # a guest's first refusal
    assert out["admission_rejected"]["kata"] == 1 and out["unscheduled"]["kubevirt"] == 1
    assert out["misc_current"] == 2
    # Scenario seconds: wall seconds since the start times the pace (2), the API's stamps whole seconds.
    assert out["guests"]["kubevirt-00002"] == {"bound": 18, "started": 40, "tries": 3}
    assert out["guests"]["kata-00001"] == {"bound": 6, "started": 8, "tries": 1}


def test_a_vmi_requests_the_strategys_device_and_retries_by_virt_handlers_back_off(tmp_path) -> None:
    node = fake_node(tmp_path)
    arrival = Arrival(30.0, 2, Consumer.KUBEVIRT, "tdx", 90.0, 4.0)
    pod = real_node_run.pod(
        arrival, node, 3.0, vmi_requests={"devices.kubevirt.io/tdx": 1}, settings=Settings(), created=1000.0
    )
    container = pod["spec"]["containers"][0]
    assert (pod["metadata"]["name"], container["name"]) == ("kubevirt-00002", "compute")
    assert container["resources"]["requests"] == {"devices.kubevirt.io/tdx": "1"}
    # Launched the model's launch delay after the pod's creation, held for the duration, both divided by the pace.
    assert container["args"][:5] == ["-socket", "/run/teesim/kernel.sock", "-not-before=1001.333", "-hold", "30.000s"]
    assert container["args"][5:-1] == real_node.retry_flags(Consumer.KUBEVIRT, Settings(), 3.0)
    assert "runtimeClassName" not in pod["spec"] and pod["spec"]["restartPolicy"] == "Never"
    kata = real_node_run.pod(
        Arrival(5.0, 1, Consumer.KATA, "tdx", 60.0, 4.0), node, 3.0, vmi_requests={}, settings=Settings(), created=0.0
    )
    assert kata["spec"]["runtimeClassName"] == "kata-qemu-tdx" and "resources" not in kata["spec"]["containers"][0]
