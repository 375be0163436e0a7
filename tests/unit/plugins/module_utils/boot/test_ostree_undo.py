"""rpm-ostree hosts: a deployment whose kernel arguments cannot be confirmed is removed again before the task fails.

The stand-in does what rpm-ostree does to the files ostree keeps: 'kargs' with changes stages a new deployment
(``/run/ostree/staged-deployment``, as 'ostree admin deploy --stage' writes it) on top of the pending one if there is
one, else the booted one; 'kargs' alone prints the arguments of the deployment that boots next; 'cleanup --pending'
removes the pending deployment. Its faults are the ones that matter: a read-back that fails or lies, a cleanup that
fails or leaves the deployment.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.confidential.tee.plugins.module_utils.boot import kernel_cmdline as kc
from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import HostReader

from .test_kernel_cmdline import tree

BOOTED = "root=UUID=1 rw ostree=/ostree/boot.1/fedora-coreos/3a9f/0 kvm_intel.tdx=0"
TOOL = "/usr/bin/rpm-ostree"


def ostree_host(tmp_path, staged: str | None = None) -> str:
    files = {
        "/run/ostree-booted": "",
        "/proc/cmdline": f"BOOT_IMAGE=(hd0,gpt3)/ostree/vmlinuz {BOOTED}\n",
        "/boot/loader/entries/ostree-1-fedora-coreos.conf": f"title Fedora CoreOS\nversion 1\noptions {BOOTED}\n",
    }
    if staged is not None:
        files[kc.OSTREE_STAGED] = staged
    return tree(tmp_path, files, executables=[TOOL])


class RpmOstree:
    """rpm-ostree as far as the files show it; ``faults`` names what goes wrong."""

    def __init__(self, root: Path, *faults: str) -> None:
        self.root, self.faults, self.calls = root, set(faults), []
        self.staged = root / kc.OSTREE_STAGED.lstrip("/")

    def next_boot(self) -> list[str]:
        return (self.staged.read_text() if self.staged.exists() else BOOTED).split()

    def __call__(self, argv):
        argv = argv[2:] if argv[0] == "chroot" else argv
        self.calls.append(argv[1:])
        if argv[1:] == ["kargs"]:
            if "readback fails" in self.faults:
                return 1, "", "error: Could not connect to the transaction (timed out)"
            return 0, " ".join(self.next_boot()) + "\n", ""
        if argv[1] == "kargs":
            args = self.next_boot()
            for option in argv[2:]:
                flag, _, value = option.partition("=")
                if flag == "--delete-if-present":
                    args = [arg for arg in args if arg != value]
                elif value not in args and "kargs drops appends" not in self.faults:
                    args.append(value)
            self.staged.parent.mkdir(parents=True, exist_ok=True)
            self.staged.write_text(" ".join(args))
            return 0, "", ""
        if argv[1:] == ["cleanup", "--pending"]:
            if "cleanup fails" in self.faults:
                return 1, "", "error: Transaction in progress"
            if "cleanup keeps it" not in self.faults:
                self.staged.unlink(missing_ok=True)
            return 0, "", ""
        return 2, "", f"unexpected {argv}"


def run(root: str, rpm_ostree: RpmOstree):
    result = kc.plan(HostReader(root), ["kvm_intel.tdx=1", "nohibernate"], [])
    executor = kc.Executor(HostReader(root), False, rpm_ostree)
    executor.execute(result)
    kc.verify(result, executor)
    return result


STAGE = [
    "kargs",
    "--delete-if-present=kvm_intel.tdx=0",
    "--append-if-missing=kvm_intel.tdx=1",
    "--append-if-missing=nohibernate",
]


def test_confirmed_arguments_keep_the_staged_deployment(tmp_path):
    root = ostree_host(tmp_path)
    rpm_ostree = RpmOstree(tmp_path)
    result = run(root, rpm_ostree)
    assert rpm_ostree.calls == [STAGE, ["kargs"]]
    assert result.configured[-2:] == ["kvm_intel.tdx=1", "nohibernate"]
    assert kc.ostree_pending(HostReader(root)) == f"{kc.OSTREE_STAGED} exists (a staged deployment)"


@pytest.mark.parametrize("fault", ["readback fails", "kargs drops appends"])
def test_a_deployment_that_cannot_be_confirmed_is_removed_again(tmp_path, fault):
    root = ostree_host(tmp_path)
    rpm_ostree = RpmOstree(tmp_path, fault)
    with pytest.raises(kc.CmdlineError) as caught:
        run(root, rpm_ostree)
    message = str(caught.value)
    assert rpm_ostree.calls == [STAGE, ["kargs"], ["cleanup", "--pending"]]
    assert "removed again ('/usr/bin/rpm-ostree cleanup --pending', and none is pending now)" in message
    assert "nothing had been changed yet" not in message
    # The host is as before the task: nothing pending, the running deployment boots next with its arguments.
    assert kc.ostree_pending(HostReader(root)) is None and rpm_ostree.next_boot() == BOOTED.split()


@pytest.mark.parametrize(
    ("fault", "words"),
    [
        ("cleanup fails", "cleanup --pending' failed with exit code 1 (error: Transaction in progress)"),
        ("cleanup keeps it", "cleanup --pending' ran, but a deployment is still pending"),
    ],
)
def test_a_cleanup_that_does_not_undo_it_says_so(tmp_path, fault, words):
    root = ostree_host(tmp_path)
    rpm_ostree = RpmOstree(tmp_path, "readback fails", fault)
    with pytest.raises(kc.CmdlineError) as caught:
        run(root, rpm_ostree)
    assert words in str(caught.value) and "boots next" in str(caught.value)


def test_a_deployment_pending_before_the_task_is_never_discarded(tmp_path):
    update = "root=UUID=1 rw ostree=/ostree/boot.1/fedora-coreos/77c1/0 kvm_intel.tdx=0"  # an update, staged
    root = ostree_host(tmp_path, staged=update)
    rpm_ostree = RpmOstree(tmp_path, "readback fails")
    with pytest.raises(kc.CmdlineError) as caught:
        run(root, rpm_ostree)
    message = str(caught.value)
    assert ["cleanup", "--pending"] not in rpm_ostree.calls
    assert "a deployment was already pending before this task" in message and "nothing was removed" in message
    assert "discard both with '/usr/bin/rpm-ostree cleanup --pending'" in message


def test_pending_is_read_from_the_entries_and_the_running_kernel(tmp_path):
    root = ostree_host(tmp_path)
    assert kc.ostree_pending(HostReader(root)) is None
    newer = "title Fedora CoreOS\nversion 2\noptions root=UUID=1 ostree=/ostree/boot.0/fedora-coreos/77c1/0\n"
    (tmp_path / "boot/loader/entries/ostree-2-fedora-coreos.conf").write_text(newer)
    assert "ostree-2-fedora-coreos.conf is not the running deployment" in kc.ostree_pending(HostReader(root))
    (tmp_path / "proc/cmdline").write_text("BOOT_IMAGE=/vmlinuz root=UUID=1\n")
    assert "running deployment is unknown" in kc.ostree_pending(HostReader(root))
