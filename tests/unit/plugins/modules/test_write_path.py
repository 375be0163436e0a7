"""The one write path, through every writing module: no secret reaches any output, and a failure in any planned
write leaves every file of the task as it was; check mode's diff is what a real run writes."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from ansible.module_utils.basic import AnsibleModule
from ansible_collections.confidential.tee.plugins.module_utils.common import changes as changes_mod
from ansible_collections.confidential.tee.plugins.module_utils.common.changes import show_bytes
from ansible_collections.confidential.tee.plugins.module_utils.common.manifests import marker
from ansible_collections.confidential.tee.plugins.modules import (
    dcap_config,
    host_files,
    kernel_cmdline,
    tee_fleet_report,
    tee_manifests,
)

DEFAULT = (
    '{"HTTPS_PORT": 8081, "hosts": "127.0.0.1", "uri": "https://api.trustedservices.intel.com/sgx/certification/v4/",'
    ' "ApiKey": "", "UserTokenHash": "", "AdminTokenHash": "", "CachingFillMode": "LAZY", "DB_CONFIG": "sqlite",'
    ' "sqlite": {}}'
)
OLD_API_KEY = "feedfacefeedfacefeedfacefeedface"
NEW_API_KEY = "0123456789abcdef0123456789abcdef"
OLD_MPA_KEY = "aaaabbbbccccddddeeeeffff00001111"
NEW_MPA_KEY = "99998888777766665555444433332222"


def host_tree(root: Path) -> Path:
    (root / "etc").mkdir(parents=True)
    (root / "etc/passwd").write_text(f"root:x:0:0::/root:/bin/sh\npccs:x:{os.getuid()}:0::/:/bin/sh\n")
    (root / "etc/group").write_text(f"root:x:0:\npccs:x:{os.getgid()}:\n")
    return root


def state(root: Path) -> dict:
    """Every path under ``root``: bytes and mode of files, targets of links, directories."""
    seen = {}
    for path in sorted(root.rglob("*")):
        if path.is_symlink():
            seen[str(path.relative_to(root))] = ("link", os.readlink(path))
        elif path.is_dir():
            seen[str(path.relative_to(root))] = ("dir",)
        else:
            seen[str(path.relative_to(root))] = ("file", path.read_bytes(), stat.S_IMODE(path.stat().st_mode))
    return seen


# ------------------------------------------------------------------------------ one scenario per writing module
# Each returns (module, args, secret values that must never be shown) for a tree under ``root``.


def kernel_cmdline_case(root):
    host_tree(root)
    (root / "etc/kernel").mkdir()
    (root / "etc/kernel/cmdline").write_text("root=UUID=1 ro rd.iscsi.password=S3cretIscsiPw quiet\n")
    return kernel_cmdline, {"host_root": str(root), "present": ["nohibernate"]}, ["S3cretIscsiPw"]


def qgs_case(root):
    host_tree(root)
    (root / "etc/qgs.conf").write_text("port = 4050\n")
    return dcap_config, {"host_root": str(root), "component": "qgs", "dcap_version": "1.25"}, []


def qcnl_case(root):
    host_tree(root)
    (root / "etc/sgx_default_qcnl.conf").write_text('{"pccs_url": "https://old.example/sgx/certification/v4/"}\n')
    settings = {"pccs_url": "https://pccs.example:8081/sgx/certification/v4/"}
    return dcap_config, {"host_root": str(root), "component": "qcnl", "settings": settings}, []


def pccs_case(root):
    host_tree(root)
    config = root / "opt/intel/sgx-dcap-pccs/config"
    config.mkdir(parents=True)
    (config / "default.json").write_text(DEFAULT)
    # Not strict JSON (JSON5 unquoted keys, the value on its own line): line rules cannot redact it.
    (config / "production.json").write_text(f'{{\n  ApiKey:\n    "{OLD_API_KEY}",\n  hosts: "127.0.0.1",\n}}\n')
    secrets = {"api_key": NEW_API_KEY, "user_token": "user-token-1", "admin_token": "admin-token-2"}
    args = {"host_root": str(root), "component": "pccs", "secrets": secrets, "on_invalid": "replace"}
    return dcap_config, args, [OLD_API_KEY, *secrets.values()]


def mpa_case(root):
    host_tree(root)
    (root / "etc/mpa_registration.conf").write_text(f"log level = info\nsubscription key = {OLD_MPA_KEY}\n")
    args = {"host_root": str(root), "component": "mpa", "secrets": {"subscription_key": NEW_MPA_KEY}}
    return dcap_config, args, [OLD_MPA_KEY, NEW_MPA_KEY]


def manifests_case(root):
    dest = root / "gitops"
    dest.mkdir(parents=True)
    (dest / "10-configmap-a.yaml").write_text(marker("o") + "kind: ConfigMap\ndata: {a: old}\n")
    secret = marker("o") + "kind: Secret\ndata: {key: c2VjcmV0LXZhbHVlLWJhc2U2NA==}\n"
    args = {
        "dest": str(dest),
        "owner": "o",
        "files": [{"file": "10-configmap-a.yaml", "content": marker("o") + "kind: ConfigMap\ndata: {a: new}\n"}],
        "secret_files": [{"file": "05-secret-b.yaml", "content": secret}],
    }
    return tee_manifests, args, ["c2VjcmV0LXZhbHVlLWJhc2U2NA=="]


def fleet_report_case(root):
    (root / "report").mkdir(parents=True)
    (root / "report/report.md").write_text("old report\n")
    args = {
        "dest": str(root / "report"),
        "hosts": [{"name": "node-a"}],
        "kubernetes": {"nodes": [], "pods": []},
        "formats": ["markdown", "json", "prometheus"],
    }
    return tee_fleet_report, args, []


def host_files_case(root):
    host_tree(root)
    (root / "etc/modules-load.d").mkdir()
    (root / "etc/modules-load.d/vfio.conf").write_text("vfio\n")
    files = [
        {"path": "/etc/modules-load.d/vfio.conf", "content": "vfio\nvfio_pci\n", "mode": "0644"},
        {"path": "/opt/pccs/ssl_key/private.pem", "content": "-----PRIVATE KEY zyx987-----\n", "secret": True},
    ]
    return host_files, {"host_root": str(root), "files": files}, ["-----PRIVATE KEY zyx987-----\n", "zyx987"]


CASES = [
    kernel_cmdline_case,
    qgs_case,
    qcnl_case,
    pccs_case,
    mpa_case,
    manifests_case,
    fleet_report_case,
    host_files_case,
]


@pytest.fixture
def no_commands(monkeypatch):
    monkeypatch.setattr(AnsibleModule, "run_command", lambda self, argv, **kw: (0, "", ""))


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.__name__)
def test_no_secret_reaches_any_output(case, tmp_path, run_module, no_commands):
    module, args, secrets = case(tmp_path / "host")
    outputs = [
        run_module(module, dict(args, _ansible_diff=True), check_mode=True),
        run_module(module, dict(args, _ansible_diff=True)),
    ]
    assert not outputs[1]["failed"], outputs[1]["msg"]
    shown = json.dumps(outputs)
    assert [secret for secret in secrets if secret in shown] == []


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.__name__)
def test_a_failure_in_the_last_planned_write_leaves_every_file_as_it_was(
    case, tmp_path, run_module, no_commands, monkeypatch
):
    # A rehearsal on a copy counts the planned writes; then the real tree fails on the last of them.
    module, args, _secrets = case(tmp_path / "rehearsal")
    real_write, planned = changes_mod.atomic_write, []

    def counting(real, data, **kwargs):
        if not real.endswith("~"):
            planned.append(real)
        return real_write(real, data, **kwargs)

    monkeypatch.setattr(changes_mod, "atomic_write", counting)
    assert not run_module(module, args)["failed"]
    assert planned, "the scenario must write something"
    module, args, secrets = case(tmp_path / "host")
    before = state(tmp_path / "host")
    writes = []

    def failing(real, data, **kwargs):
        if not real.endswith("~"):
            writes.append(real)
            if len(writes) == len(planned):
                raise OSError(28, "No space left on device")
        return real_write(real, data, **kwargs)

    monkeypatch.setattr(changes_mod, "atomic_write", failing)
    result = run_module(module, args)
    assert result["failed"] and "No space left on device" in result["msg"]
    assert [secret for secret in secrets if secret in json.dumps(result)] == []
    assert state(tmp_path / "host") == before


def test_dcap_config_failing_on_its_second_file_leaves_qgs_conf_as_it_was(tmp_path, run_module):
    root = host_tree(tmp_path)
    (root / "etc/qgs.conf").write_text("port = 4050\n")
    (root / "etc/systemd/system").mkdir(parents=True)
    (root / "etc/systemd/system/qgsd.service.d").write_text("a file where the drop-in directory goes\n")
    before = state(root)
    result = run_module(dcap_config, {"host_root": str(root), "component": "qgs", "dcap_version": "1.25"})
    assert result["failed"] and "qgsd.service.d (a file, not a directory)" in result["msg"]
    assert state(root) == before


def test_pccs_diff_of_a_file_that_is_not_strict_json_never_shows_the_old_api_key(tmp_path, run_module):
    module, args, _secrets = pccs_case(tmp_path)
    result = run_module(module, dict(args, _ansible_diff=True))
    assert OLD_API_KEY not in json.dumps(result)
    assert result["diff"][0]["before"].startswith("(secret file: content not shown, sha256 ")
    assert '"ApiKey": "<redacted>"' in result["diff"][0]["after"]


@pytest.mark.parametrize(
    "module_case",
    ["kernel_cmdline", "host_files"],
)
def test_check_diff_after_is_what_the_real_run_writes_through_a_link_with_non_utf8_bytes(
    module_case, tmp_path, run_module, no_commands
):
    root = host_tree(tmp_path)
    (root / "srv").mkdir()
    if module_case == "kernel_cmdline":
        (root / "srv/cmdline").write_bytes(b"root=UUID=1 ro title=caf\xe9 quiet\n")
        (root / "etc/kernel").mkdir()
        (root / "etc/kernel/cmdline").symlink_to("/srv/cmdline")
        module, args = kernel_cmdline, {"host_root": str(root), "present": ["nohibernate"]}
        target = root / "srv/cmdline"
    else:
        (root / "srv/modules.conf").write_bytes(b"# caf\xe9\nvfio\n")
        (root / "etc/modules.conf").symlink_to("/srv/modules.conf")
        content = b"# caf\xe9\nvfio\nvfio_pci\n".decode("utf-8", "surrogateescape")
        module = host_files
        args = {"host_root": str(root), "files": [{"path": "/etc/modules.conf", "content": content}]}
        target = root / "srv/modules.conf"
    planned = run_module(module, dict(args, _ansible_diff=True), check_mode=True)
    [file_diff] = [d for d in planned["diff"] if d["before_header"].startswith(str(root))]
    assert file_diff["before"] == show_bytes(target.read_bytes())
    run_module(module, args)
    assert (root / ("etc/kernel/cmdline" if module_case == "kernel_cmdline" else "etc/modules.conf")).is_symlink()
    assert file_diff["after"] == show_bytes(target.read_bytes())
    assert b"caf\xe9" in target.read_bytes()


def test_host_files_refuses_a_relative_path_and_a_bad_mode(tmp_path, run_module):
    root = host_tree(tmp_path)
    relative = run_module(host_files, {"host_root": str(root), "files": [{"path": "etc/x", "content": "x"}]})
    assert relative["failed"] and "not absolute" in relative["msg"]
    files = [{"path": "/etc/x", "content": "x", "mode": "rw-r--r--"}]
    bad_mode = run_module(host_files, {"host_root": str(root), "files": files})
    assert bad_mode["failed"] and "not an octal mode" in bad_mode["msg"] and not (root / "etc/x").exists()


def test_host_files_is_idempotent_and_backs_up(tmp_path, run_module):
    root = host_tree(tmp_path)
    (root / "etc/x.conf").write_text("old\n")
    args = {"host_root": str(root), "files": [{"path": "/etc/x.conf", "content": "new\n", "mode": "0640"}]}
    first = run_module(host_files, args)
    assert first["changed"] and len(first["backups"]) == 1 and Path(first["backups"][0]).read_text() == "old\n"
    assert stat.S_IMODE((root / "etc/x.conf").stat().st_mode) == 0o640
    assert run_module(host_files, args)["changed"] is False


def test_host_files_copies_a_host_file_resolving_links_inside_host_root(tmp_path, run_module):
    root = host_tree(tmp_path)
    outside = tmp_path / "controller-ca.crt"
    outside.write_bytes(b"NOT THE HOST'S CA\n")
    (root / "opt/pccs").mkdir(parents=True)
    (root / "opt/pccs/ca.crt").write_bytes(b"-----BEGIN CERTIFICATE-----\nhost\n")
    # An absolute link means the host's own path, as chroot would read it, never the controller's file.
    (root / "opt/pccs/link.crt").symlink_to("/opt/pccs/ca.crt")
    args = {"host_root": str(root), "files": [{"path": "/etc/trust/pccs.crt", "src": "/opt/pccs/link.crt"}]}
    assert run_module(host_files, args)["changed"]
    assert (root / "etc/trust/pccs.crt").read_bytes() == b"-----BEGIN CERTIFICATE-----\nhost\n"
    assert run_module(host_files, args)["changed"] is False
    missing = run_module(host_files, {"host_root": str(root), "files": [{"path": "/etc/a", "src": "/opt/none"}]})
    assert missing["failed"] and "/opt/none" in missing["msg"] and not (root / "etc/a").exists()
    both = run_module(host_files, {"host_root": str(root), "files": [{"path": "/etc/a", "src": "/x", "content": "y"}]})
    assert both["failed"] and "mutually exclusive" in both["msg"]
