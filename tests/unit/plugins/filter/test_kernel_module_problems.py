"""confidential.tee.kernel_module_problems: the kernel_modules module's name rule, for roles that render the file."""

from __future__ import annotations

import pytest


@pytest.fixture
def problems(call_filter):
    return lambda *args: call_filter("kernel_modules", "kernel_module_problems", *args)


def test_module_names_pass(problems):
    assert problems(["vhost_vsock", "vsock_loopback", "vfio-pci", "nvidia.ko"]) == {"value": []}


@pytest.mark.parametrize("name", ["vfio\nbad_line", "-r", "../evil", "vfio pci", "", 7])
def test_a_name_that_could_add_a_line_or_an_option_is_refused_naming_the_variable(problems, name):
    messages = problems(["vfio", name], "iommu_passthrough_vfio_modules")["value"]
    assert len(messages) == 1 and messages[0].startswith("iommu_passthrough_vfio_modules: "), messages


def test_an_empty_list_or_a_string_is_refused(problems):
    for modules in ([], "vhost_vsock,vsock_loopback", None):
        (message,) = problems(modules, "vsock_modules")["value"]
        assert message.startswith("vsock_modules must be a non-empty list"), message
    assert "variable must be" in problems(["vfio"], "")["filter_error"]
