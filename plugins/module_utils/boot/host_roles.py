# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""What each host role asks of the next boot and of the module loader: its input checks and its requests.

One home for tdx_host, snp_host, iommu_passthrough and vsock. A role's ``tasks/request.yml`` and
``playbooks/tee_node.yml`` both read a role's plan through the lookup ``confidential.tee.host_role_request``
(which resolves the role's variables over its own ``defaults/main.yml``), so the playbook can apply every role's
kernel arguments with one boot update and every role's modules with one call before it enters any role, and
enter each role once. Pure functions of the role's variables and what was read from the host; no I/O.

A plan is a dict: ``problems`` (messages; empty when the inputs are good), ``cmdline`` (one ``requests`` entry of
``kernel_cmdline``, or ``None``), ``modules`` (one ``requests`` entry of ``kernel_modules``, or ``None``), and the
role's own notes (``kernel_args``, ``vendor``, ``in_container``, ``configured_read``).
"""

from __future__ import annotations

from collections.abc import Mapping

from ansible.module_utils.parsing.convert_bool import boolean
from ansible_collections.confidential.tee.plugins.module_utils.common.validation import list_option_errors
from ansible_collections.confidential.tee.plugins.module_utils.host.kernel_modules import name_problems
from ansible_collections.confidential.tee.plugins.module_utils.host.readiness import describe_cmdline

OUTPUTS = ("host", "machineconfig")
STATES = ("present", "absent")


def plan(role: str, values: Mapping, context: Mapping | None = None) -> dict:
    """The plan of ``role`` for its resolved variables ``values``; ``context`` is what is known of the host.

    ``context``: ``options`` and ``raw_defaults`` (the role's argument_specs options and unrendered defaults, for
    the list check every role runs first), ``host_root``, ``facts`` (``ansible_facts``: the virtualization facts
    that tell a container), ``host_info`` (a ``tee_host_info`` read: the CPU vendor for ``auto``), ``configured``
    (snp_host: a check-mode ``kernel_cmdline`` read of the configured line) and ``host`` (the inventory name).
    """
    context = context or {}
    if role not in PLANNERS:
        raise ValueError(f"confidential.tee.host_role_request knows the roles {', '.join(PLANNERS)}, not {role!r}")
    options = context.get("options") or {}
    listed = {name: values.get(name) for name, spec in options.items() if spec.get("type") == "list"}
    lists = list_option_errors(listed, options, context.get("raw_defaults"))
    if lists:
        return _plan(["; ".join(lists)])
    return PLANNERS[role](values, context)


def in_container(facts: Mapping | None, container_types: list) -> bool:
    """Whether setup's virtualization facts say this host is a container of one of ``container_types``."""
    facts = facts or {}
    return facts.get("virtualization_role", "") == "guest" and facts.get("virtualization_type", "") in container_types


def _plan(problems: list[str], **notes) -> dict:
    return {"problems": problems, "cmdline": None, "modules": None} | notes


def _cmdline_request(name: str, args: list[str], state: str) -> dict:
    return {"name": name, "present": args if state == "present" else [], "absent": args if state == "absent" else []}


def _modules_request(prefix: str, values: Mapping, state: str, load: bool) -> dict:
    return {
        "path": values[f"{prefix}_modules_load_file"],
        "modules": values[prefix + ("_vfio_modules" if prefix == "iommu_passthrough" else "_modules")],
        "content": values[f"{prefix}_modules_load_content"],
        "mode": "0644",
        "state": state,
        "load": load,
    }


def _may_load_now(values: Mapping, prefix: str, context: Mapping, inside: bool) -> bool:
    """Whether a module can be loaded now: the role may, the root is this host's and it is not a container."""
    return boolean(values[f"{prefix}_load_now"]) and context.get("host_root", "/") == "/" and not inside


def tdx_host(values: Mapping, context: Mapping) -> dict:
    output, state = values["tdx_host_output"], values["tdx_host_state"]
    if output not in OUTPUTS or state not in STATES or (output == "machineconfig" and state == "absent"):
        return _plan(
            [
                f"tdx_host_output must be 'host' or 'machineconfig' (got {output}) and tdx_host_state 'present' or "
                f"'absent' (got {state}; a MachineConfig is reverted by deleting it from the cluster)."
            ]
        )
    args = list(values["tdx_host_kernel_args"]) + list(values["tdx_host_extra_kernel_args"])
    return _plan([], cmdline=_cmdline_request(values["tdx_host_grub_dropin"], args, state), kernel_args=args)


def snp_host(values: Mapping, context: Mapping) -> dict:
    """SEV-SNP's arguments; on a host, the configured line is read first (``configured_read`` says how) and passed
    back as ``context['configured']``: IOMMU passthrough there is refused, or removed with snp_host_remove_iommu_pt."""
    output = values["snp_host_output"]
    args = list(values["snp_host_kernel_args"]) + list(values["snp_host_extra_kernel_args"])
    verdict = describe_cmdline(" ".join(args), source="arguments")["verdict"]
    if output not in OUTPUTS or not verdict["snp"]["ready"] or verdict["problems"]:
        return _plan(
            [
                f"snp_host_output must be 'host' or 'machineconfig' (got {output}), and the requested kernel "
                "arguments must leave SEV-SNP usable: "
                + "; ".join(list(verdict["snp"]["reasons"]) + list(verdict["problems"]))
                + "."
            ]
        )
    if output != "host":
        return _plan([], kernel_args=args)
    read = {"name": values["snp_host_grub_dropin"], "boot_setup": values["snp_host_boot_setup"]}
    configured = context.get("configured")
    if configured is None:
        return _plan([], kernel_args=args, configured_read=read)
    remedy = configured["configured_facts"]["iommu_passthrough_remedy"]
    remove = boolean(values["snp_host_remove_iommu_pt"])
    if remedy["needed"] and not remove:
        passthrough = " ".join(configured["configured_facts"]["iommu"]["passthrough_args"])
        return _plan(
            [
                f"{passthrough} is configured ({configured['source']}): it makes the IOMMU default domain "
                "passthrough, and the AMD IOMMU driver then disables SEV-SNP. Remove it, or set "
                "snp_host_remove_iommu_pt: true to let this role remove it (other iommu= options are kept)."
            ],
            kernel_args=args,
            configured_read=read,
        )
    remedy = remedy if remove else {"present": [], "absent": []}
    request = {
        "name": values["snp_host_grub_dropin"],
        "present": args + list(remedy["present"]),
        "absent": list(values["snp_host_absent_kernel_args"]) + list(remedy["absent"]),
    }
    return _plan([], cmdline=request, kernel_args=args, configured_read=read)


def iommu_passthrough(values: Mapping, context: Mapping) -> dict:
    """The IOMMU arguments of the CPU vendor (read from ``host_info`` for ``auto``) and, on a host, the vfio file."""
    output, vendor, state = (values[f"iommu_passthrough_{key}"] for key in ("output", "cpu_vendor", "state"))
    intel, amd = list(values["iommu_passthrough_intel_kernel_args"]), list(values["iommu_passthrough_amd_kernel_args"])
    verdict = describe_cmdline(" ".join(intel + amd), source="arguments")["verdict"]
    # The kernel_modules module's own rule: no name can add a line to the modules-load file, here or in a MachineConfig.
    module_problems = name_problems(values["iommu_passthrough_vfio_modules"], "iommu_passthrough_vfio_modules")
    if (
        output not in OUTPUTS
        or vendor not in ("intel", "amd", "auto")
        or state not in STATES
        or (output == "machineconfig" and (state == "absent" or vendor == "auto"))
        or verdict["problems"]
        or module_problems
    ):
        return _plan([_iommu_message(output, vendor, state, verdict["problems"], module_problems)])
    if vendor == "auto":
        vendor = (context.get("host_info") or {}).get("tee_vendor")
    if vendor not in ("intel", "amd"):
        return _plan([], vendor=None)  # the role reads the CPU vendor, or refuses it, and asks again
    args = intel if vendor == "intel" else amd
    name = values["iommu_passthrough_grub_dropin"]
    notes = {"vendor": vendor, "kernel_args": args, "cmdline": _cmdline_request(name, args, state) if args else None}
    if output != "host":
        return _plan([], **notes)
    inside = in_container(context.get("facts"), values["iommu_passthrough_container_types"])
    load = state == "present" and _may_load_now(values, "iommu_passthrough", context, inside)
    return _plan([], **notes, in_container=inside, modules=_modules_request("iommu_passthrough", values, state, load))


def _iommu_message(output: str, vendor: str, state: str, arg_problems: list, module_problems: list) -> str:
    return (
        "iommu_passthrough_output must be host or machineconfig, iommu_passthrough_cpu_vendor intel, amd or auto "
        "(auto only for host output: a MachineConfig is rendered without seeing the nodes), iommu_passthrough_state "
        "present or absent (absent only for host output), and the kernel arguments must be valid (got "
        f"output={output}, vendor={vendor}, state={state}; {'; '.join(arg_problems) or 'arguments valid'})"
        + ("; " + "; ".join(module_problems) if module_problems else "")
        + "."
    )


def vsock(values: Mapping, context: Mapping) -> dict:
    """vsock's modules-load file, on a host (a MachineConfig carries the same file)."""
    output = values["vsock_output"]
    # The kernel_modules module's own rule: no name can add a line to the modules-load file, here or in a MachineConfig.
    problems = name_problems(values["vsock_modules"], "vsock_modules")
    if output not in OUTPUTS:
        problems = [f"vsock_output must be host or machineconfig, got {output}", *problems]
    if problems:
        return _plan([f"{'; '.join(problems)} (on {context.get('host', 'this host')})"])
    if output != "host":
        return _plan([])
    inside = in_container(context.get("facts"), values["vsock_container_types"])
    load = _may_load_now(values, "vsock", context, inside)
    return _plan([], in_container=inside, modules=_modules_request("vsock", values, "present", load))


PLANNERS = {"tdx_host": tdx_host, "snp_host": snp_host, "iommu_passthrough": iommu_passthrough, "vsock": vsock}
