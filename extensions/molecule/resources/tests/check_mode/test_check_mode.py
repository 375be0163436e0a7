"""After `molecule check` (converge with --check): not one byte, mode or owner changed."""

from __future__ import annotations


def test_nothing_changed(host):
    before = host.file("/var/tmp/tee-tree.before").content_string
    assert before.count("\n") > 50  # the snapshot really covered the trees
    now = host.check_output("/usr/local/sbin/tee-tree-snapshot") + "\n"
    assert now == before


def test_no_bootloader_tool_was_called(host):
    assert not host.file("/var/log/tee-bootloader-calls.log").exists


def test_no_dropin_was_created(host):
    for path in [
        "/etc/default/grub.d/90-confidential-tee-tdx.cfg",
        "/etc/modules-load.d/vsock.conf",
        "/etc/modprobe.d/confidential-tee-tdx.conf",
    ]:
        assert not host.file(path).exists, path
