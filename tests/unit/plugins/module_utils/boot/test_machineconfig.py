"""MachineConfig rendering and the Ignition shape checks of module_utils.boot.machineconfig."""

from __future__ import annotations

import pytest
from ansible_collections.confidential.tee.plugins.module_utils.boot import machineconfig as mc
from hypothesis import given
from hypothesis import strategies as st


def test_render_kernel_arguments_and_files():
    rendered = mc.render(
        "99-worker-confidential-tee-vsock",
        "worker",
        ["kvm_intel.tdx=1"],
        [{"path": "/etc/modules-load.d/vsock.conf", "contents": "vhost_vsock\nvsock_loopback\n", "mode": "0640"}],
    )
    assert rendered["apiVersion"] == "machineconfiguration.openshift.io/v1"
    assert rendered["metadata"] == {
        "name": "99-worker-confidential-tee-vsock",
        "labels": {"machineconfiguration.openshift.io/role": "worker"},
    }
    assert rendered["spec"]["kernelArguments"] == ["kvm_intel.tdx=1"]
    entry = rendered["spec"]["config"]["storage"]["files"][0]
    assert entry["mode"] == 416  # 0o640 as the decimal Ignition wants
    assert entry["contents"]["source"] == "data:,vhost_vsock%0Avsock_loopback%0A"
    assert mc.decode_data_url(entry["contents"]["source"]) == "vhost_vsock\nvsock_loopback\n"
    assert mc.ignition_problems(rendered["spec"]["config"]) == []


def test_no_files_and_no_arguments_leave_the_keys_out():
    rendered = mc.render("99-master-x", "master")
    assert rendered["spec"] == {"config": {"ignition": {"version": "3.2.0"}}}


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"name": "Bad_Name", "role": "worker"}, "not a valid Kubernetes object name"),
        ({"name": "ok", "role": "Worker Pool"}, "not a valid MachineConfigPool role"),
        ({"name": "ok", "role": "worker", "kernel_arguments": ["a b"]}, "one non-empty token"),
        ({"name": "ok", "role": "worker", "files": [{"path": "rel", "contents": ""}]}, "must be absolute"),
        ({"name": "ok", "role": "worker", "files": [{"path": "/x"}]}, "needs 'path' and 'contents'"),
        ({"name": "ok", "role": "worker", "files": [{"path": "/x", "contents": "", "mode": 0o17777}]}, "mode"),
        ({"name": "ok", "role": "worker", "files": [{"path": "/x", "contents": 3}]}, "must be a string"),
    ],
)
def test_bad_input_is_named(kwargs, fragment):
    with pytest.raises(mc.MachineConfigError, match=fragment):
        mc.render(**kwargs)


def test_ignition_problems_catch_each_bad_shape():
    bad = {
        "ignition": {"version": "2.2.0"},
        "storage": {"files": [{"path": "etc/x", "mode": "0644", "contents": {"source": "http://x"}}, 7]},
    }
    problems = mc.ignition_problems(bad)
    assert len(problems) == 5
    assert any("3.x.y" in p for p in problems) and any("decimal integer" in p for p in problems)
    assert mc.ignition_problems([]) == ["spec.config must be a mapping"]
    assert mc.ignition_problems({"ignition": {"version": "3.4.0"}, "storage": {"files": {}}}) == [
        "storage.files must be a list"
    ]


@given(st.text())
def test_data_urls_round_trip_any_text(text):
    assert mc.decode_data_url(mc.data_url(text)) == text
    assert "," not in mc.data_url(text)[len("data:,") :]
