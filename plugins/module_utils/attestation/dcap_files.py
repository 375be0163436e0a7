# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""The files each DCAP component needs, their owners and modes, and what their readers will make of them.

One function per component turns a request into :class:`FileSpec` records (content, owner, group, mode), the
systemd units to restart when they change, and the *effective* view: the written file read back by the same
reader the service uses (:mod:`qgs_config`, :mod:`qcnl_config`, :mod:`pccs_config`, :mod:`registration`).
:func:`record` hands every file of a component to the one change recorder (:mod:`common.changes`) at once, with
what makes a file secret: how to redact it surely, and how to find the secret values in its old and new text, so
results, messages and diffs never carry an API key, a token, a token hash or a password.

Standard library only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ansible_collections.confidential.tee.plugins.module_utils.attestation import jsonc
from ansible_collections.confidential.tee.plugins.module_utils.attestation.dcap_version import (
    DcapVersionError,
    detect_dcap_version,
    parse_dcap_version,
    qgs_behaviour,
)
from ansible_collections.confidential.tee.plugins.module_utils.attestation.pccs_config import (
    SECRET_PATHS,
    config_problems,
    effective_config,
    overrides_on_host,
    render_settings,
    update_production,
)
from ansible_collections.confidential.tee.plugins.module_utils.attestation.qcnl_config import (
    qcnl_effective,
    qcnl_warnings,
    update_qcnl,
)
from ansible_collections.confidential.tee.plugins.module_utils.attestation.qgs_config import (
    DROPIN_PATH,
    SOCKET_ACCESS_HELPER,
    VSOCK_UNIT_PATH,
    effective_qgs,
    qgs_plan,
)
from ansible_collections.confidential.tee.plugins.module_utils.attestation.qgs_unit import merge_unit, unit_problems
from ansible_collections.confidential.tee.plugins.module_utils.attestation.registration import (
    MPA_CONF,
    parse_mpa_conf,
    redact_mpa,
    update_mpa_conf,
)
from ansible_collections.confidential.tee.plugins.module_utils.common.errors import TeeError

REDACTED = jsonc.REDACTED


class ComponentError(TeeError):
    """A request that cannot be turned into files (bad input, a file that does not parse)."""


def _refused(exc: ValueError, message: str | None = None) -> ComponentError:
    """``exc`` as a :class:`ComponentError` that keeps the option it names (``message`` replacing its text)."""
    return ComponentError(str(exc) if message is None else message, option=getattr(exc, "option", None))


@dataclass
class FileSpec:
    path: str
    content: str | None
    owner: str = "root"
    group: str = "root"
    mode: int = 0o644
    units: list[str] = field(default_factory=list)
    # A secret file: ``redact`` turns its text into what may be shown (raising when it cannot be sure), and
    # ``find_secrets`` lists the secret values in a text (the old file's too), to be hidden wherever they appear.
    secret: bool = False
    redact: object = None
    find_secrets: object = None
    change: object = None  # the recorder's FileChange, once recorded


def record(changes, plan: ComponentPlan) -> None:
    """Plan every file of a component in the recorder: all of them are validated before the first is written."""
    for spec in plan.files:
        spec.change = changes.file(
            spec.path,
            spec.content,
            mode=spec.mode,
            owner=spec.owner,
            group=spec.group,
            secret=spec.secret,
            redactor=spec.redact,
            find_secrets=spec.find_secrets,
        )


def units_to_restart(plan: ComponentPlan) -> list[str]:
    """The systemd units whose files changed, ``daemon-reload`` first."""
    restart: list[str] = []
    for spec in plan.files:
        if spec.change is not None and spec.change.changed:
            restart.extend(unit for unit in spec.units if unit not in restart)
    return sorted(restart, key=lambda unit: unit != "daemon-reload")


@dataclass
class ComponentPlan:
    files: list[FileSpec]
    effective: dict
    warnings: list[str] = field(default_factory=list)
    info: dict = field(default_factory=dict)


def _read(reader, path: str) -> str | None:
    read = reader.read(path, limit=4 * 1024 * 1024, record=False)
    if read.problem and read.exists:
        raise ComponentError(f"{read.problem.describe()}; fix or remove it before configuring")
    return read.text("surrogateescape") if read.data is not None else None


def resolve_version(reader, wanted: str) -> tuple[object, str]:
    """``(DcapVersion, source)`` from ``wanted`` or, for ``auto``, from the installed tdx-qgs package."""
    try:
        if wanted and wanted != "auto":
            return parse_dcap_version(wanted), "given"
        found, source = detect_dcap_version(reader)
        if found is None:
            raise ComponentError(f"cannot tell the DCAP version: {source}", option="dcap_version")
        return parse_dcap_version(found), source
    except DcapVersionError as exc:
        raise _refused(exc) from None


def plan_qgs(reader, params: dict) -> ComponentPlan:
    version, source = resolve_version(reader, params["dcap_version"])
    behaviour = qgs_behaviour(version)
    try:
        plan = qgs_plan(
            behaviour,
            params["transport"],
            params["consumers"],
            vsock_port=params["vsock_port"],
            threads=params["number_threads"],
            socket_group=params["socket_group"],
            qgs_dir=params["qgs_dir"],
            extra_clients=params["extra_clients"],
            current_conf=_read(reader, "etc/qgs.conf"),
            kata_version=params.get("kata_version"),
        )
    except ValueError as exc:
        raise _refused(exc, f"{exc} (DCAP {version})") from None
    effective = effective_qgs(plan.files["/etc/qgs.conf"], behaviour)
    # The file is edited, not replaced: a line of the administrator's that QGS rejects stops it here, named.
    wanted = "unix" if plan.transport in ("unix", "both") else "vsock"
    if effective.transport != wanted:
        raise ComponentError(
            f"/etc/qgs.conf, edited for transport {plan.transport}, would make QGS of DCAP {version} use "
            f"{effective.describe()}; fix that line of /etc/qgs.conf (the role changes only port and number_threads)"
        )
    both = ["qgsd.service"] + (["qgsd-vsock.service"] if plan.transport == "both" else [])
    files = [
        FileSpec("/etc/qgs.conf", plan.files["/etc/qgs.conf"], units=both),
        FileSpec(DROPIN_PATH, plan.files[DROPIN_PATH], units=["qgsd.service", "daemon-reload"]),
        FileSpec(
            VSOCK_UNIT_PATH,
            plan.files.get(VSOCK_UNIT_PATH),
            units=["qgsd-vsock.service", "daemon-reload"] if VSOCK_UNIT_PATH in plan.files else ["daemon-reload"],
        ),
    ]
    unit = verify_unit(reader, plan, params["consumers"])
    return ComponentPlan(
        files=files,
        effective={"transport": effective.transport, "port": effective.port, "threads": effective.threads},
        warnings=plan.warnings,
        info={
            "dcap_version": str(version),
            "dcap_version_source": source,
            "era": behaviour.era,
            "transport": plan.transport,
            "listeners": plan.listeners,
            "socket_group": plan.socket_group,
            "socket_mode": f"{plan.socket_mode:04o}",
            "clients": plan.clients,
            "units": plan.units,
            "unit": unit,
        },
    )


def verify_unit(reader, plan, consumers: list[str]) -> dict:
    """qgsd.service merged as systemd will merge it once our drop-in is written: refuse what does not compose."""
    merged = merge_unit(reader, planned={DROPIN_PATH: plan.files[DROPIN_PATH]})
    if merged.fragment is None:
        # Check mode before the package is installed, or a bare tree: nothing to merge with yet.
        return {"verified": False, "reason": "qgsd.service is not installed: the merge is checked after install"}
    problems = unit_problems(merged, plan.transport, SOCKET_ACCESS_HELPER, "kubevirt" in consumers)
    if problems:
        raise ComponentError(
            "qgsd.service with our drop-in would not serve the consumers, as systemd merges "
            f"{', '.join([merged.fragment, *merged.dropins])}: {'; '.join(problems)}"
        )
    return {
        "verified": True,
        "fragment": merged.fragment,
        "dropins": merged.dropins,
        "umask": merged.last("UMask"),
        "runtime_directory_mode": merged.last("RuntimeDirectoryMode"),
    }


def plan_qcnl(reader, params: dict) -> ComponentPlan:
    path = params["qcnl_path"]
    current = _read(reader, path.lstrip("/"))
    try:
        text = update_qcnl(current, params["settings"])
    except jsonc.JsoncError as exc:
        if params["on_invalid"] != "replace":
            raise ComponentError(
                f"{path} is not JSON with comments ({exc}); QCNL would ignore it. Fix it, or set on_invalid=replace "
                "to write a new file (the old one is backed up)"
            ) from None
        text = update_qcnl(None, params["settings"])
    except ValueError as exc:
        raise _refused(exc) from None
    view = qcnl_effective(text)
    if view["problems"]:
        raise ComponentError(
            f"the written {path} would not mean what was asked: {'; '.join(view['problems'])}", option="settings"
        )
    return ComponentPlan(
        files=[FileSpec(path, text, units=["qgsd.service", "qgsd-vsock.service"])],
        effective=view["settings"],
        warnings=qcnl_warnings(view["settings"]),
    )


def plan_pccs(reader, params: dict) -> ComponentPlan:
    base = params["pccs_dir"].rstrip("/")
    production_path = f"{base}/config/production.json"
    default_text = _read(reader, f"{base}/config/default.json".lstrip("/"))
    current = _read(reader, production_path.lstrip("/"))
    try:
        members = render_settings(params["settings"], params["secrets"])
        try:
            text = update_production(current, members)
        except jsonc.JsoncError as exc:
            if params["on_invalid"] != "replace":
                raise ComponentError(
                    f"{production_path} does not parse ({exc}); fix it, or set on_invalid=replace (backed up)"
                ) from None
            text = update_production(None, members)
    except ValueError as exc:
        raise _refused(exc) from None
    config, problems = effective_config(default_text, text)
    if config is not None:
        problems += config_problems(config)
    if problems and params["validate"]:
        raise ComponentError(f"PCCS would not work with this configuration: {'; '.join(problems)}")
    later = overrides_on_host(reader, base)
    if later:
        # Writing production.json would change nothing these files set: refuse rather than report a change.
        raise ComponentError(
            f"{', '.join(f'{base}/config/{name}' for name in later)} would override the production.json written "
            "here (node-config merges them after it, NODE_ENV=production); move their settings into settings and "
            "remove them",
            option="settings",
        )
    return ComponentPlan(
        files=[
            FileSpec(
                production_path,
                text,
                owner=params["owner"] or "pccs",
                group=params["group"] or "pccs",
                mode=0o600,
                units=["pccs.service"],
                secret=True,
                redact=redact_pccs,
                find_secrets=pccs_secret_values,
            )
        ],
        effective=redact_config(config or {}),
        warnings=problems,
    )


def redact_pccs(text: str) -> str:
    """production.json with its secrets replaced; raises when it does not parse (line rules would miss some)."""
    jsonc.parse(text, True)
    return jsonc.redact(text, SECRET_PATHS)


def pccs_secret_values(text: str) -> list[str]:
    """The values at PCCS's secret paths (API key, token hashes, database password) in a production.json."""
    try:
        members = jsonc.parse(text, True).members
    except jsonc.JsoncError:
        return []
    values = []
    for path in SECRET_PATHS:
        found = members
        for depth, name in enumerate(path):
            matching = [member for member in found if member.key == name]
            if depth == len(path) - 1:
                values += [member.value for member in matching if isinstance(member.value, str)]
            found = [child for member in matching for child in member.children]
    return values


def mpa_secret_values(text: str) -> list[str]:
    """The subscription key's value on every line that sets it, however the line is spelt."""
    return [
        match.group(1).strip()
        for match in re.finditer(r"(?im)^[ \t]*subscription[ \t_]*key[ \t]*[=:][ \t]*(\S[^#\n]*)", text)
        if match.group(1).strip()
    ]


def _shown_line(line: str) -> str:
    """A line of the MPA file as a message may quote it: never one that could carry the subscription key."""
    return "(hidden: it may hold the subscription key)" if re.search(r"subscri|key", line, re.I) else repr(line)


def redact_config(config: dict) -> dict:
    """A configuration with every secret replaced (``<redacted>`` when set, ``""`` when empty)."""
    shown = dict(config)
    for path in SECRET_PATHS:
        holder = shown
        for name in path[:-1]:
            if not isinstance(holder.get(name), dict):
                holder = None
                break
            holder[name] = dict(holder[name])
            holder = holder[name]
        if holder is not None and path[-1] in holder:
            holder[path[-1]] = REDACTED if holder[path[-1]] else ""
    return shown


def plan_mpa(reader, params: dict) -> ComponentPlan:
    current = _read(reader, MPA_CONF.lstrip("/"))
    settings = dict(params["settings"])
    if params["secrets"].get("subscription_key") is not None:
        settings["subscription_key"] = params["secrets"]["subscription_key"]
    try:
        text = update_mpa_conf(current, settings)
    except ValueError as exc:
        refused = _refused(exc)
        if refused.option == "settings.subscription_key" and "subscription_key" not in params["settings"]:
            refused.option = "secrets.subscription_key"  # the key came in as a secret
        raise refused from None
    parsed = parse_mpa_conf(text)
    if parsed["invalid_lines"]:
        lines = ", ".join(f"line {number}: {_shown_line(line)}" for number, line in parsed["invalid_lines"])
        raise ComponentError(f"{MPA_CONF} has lines the MPA rejects ({lines}); fix them first")
    effective = dict(parsed["settings"])
    if "subscription_key" in effective:
        effective["subscription_key"] = REDACTED
    return ComponentPlan(
        files=[
            FileSpec(
                MPA_CONF,
                text,
                mode=0o600,
                units=["mpa_registration_tool.service"],
                secret=True,
                redact=redact_mpa,
                find_secrets=mpa_secret_values,
            )
        ],
        effective=effective,
    )


PLANNERS = {"qgs": plan_qgs, "qcnl": plan_qcnl, "pccs": plan_pccs, "mpa": plan_mpa}
