# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""The files each DCAP component needs, their owners and modes, and what their readers will make of them.

One function per component turns a request into :class:`FileSpec` records (content, owner, group, mode), the
systemd units to restart when they change, and the *effective* view: the written file read back by the same
reader the service uses (:mod:`qgs_config`, :mod:`qcnl_config`, :mod:`pccs_config`, :mod:`registration`).
Redaction happens here too, so results and diffs never carry an API key, a token, a token hash or a password.

Standard library only.
"""

from __future__ import annotations

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
    render_settings,
    update_production,
)
from ansible_collections.confidential.tee.plugins.module_utils.attestation.qcnl_config import (
    qcnl_effective,
    update_qcnl,
)
from ansible_collections.confidential.tee.plugins.module_utils.attestation.qgs_config import (
    DROPIN_PATH,
    VSOCK_UNIT_PATH,
    effective_qgs,
    qgs_plan,
)
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


@dataclass
class FileSpec:
    path: str
    content: str | None
    owner: str = "root"
    group: str = "root"
    mode: int = 0o644
    units: list[str] = field(default_factory=list)
    # Turns a file's text into what may be shown (diffs): secrets replaced.
    redact: object = None

    def shown(self, text: str | None) -> str:
        if text is None:
            return ""
        return self.redact(text) if self.redact else text


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
            raise ComponentError(f"cannot tell the DCAP version: {source}")
        return parse_dcap_version(found), source
    except DcapVersionError as exc:
        raise ComponentError(str(exc)) from None


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
        )
    except ValueError as exc:
        raise ComponentError(f"{exc} (DCAP {version})") from None
    both = ["qgsd.service"] + (["qgsd-vsock.service"] if params["transport"] == "both" else [])
    files = [
        FileSpec("/etc/qgs.conf", plan.files["/etc/qgs.conf"], units=both),
        FileSpec(DROPIN_PATH, plan.files[DROPIN_PATH], units=["qgsd.service", "daemon-reload"]),
        FileSpec(
            VSOCK_UNIT_PATH,
            plan.files.get(VSOCK_UNIT_PATH),
            units=["qgsd-vsock.service", "daemon-reload"] if VSOCK_UNIT_PATH in plan.files else ["daemon-reload"],
        ),
    ]
    effective = effective_qgs(plan.files["/etc/qgs.conf"], behaviour)
    return ComponentPlan(
        files=files,
        effective={"transport": effective.transport, "port": effective.port, "threads": effective.threads},
        warnings=plan.warnings,
        info={
            "dcap_version": str(version),
            "dcap_version_source": source,
            "era": behaviour.era,
            "listeners": plan.listeners,
            "socket_group": plan.socket_group,
            "socket_mode": f"{plan.socket_mode:04o}",
            "clients": plan.clients,
            "units": plan.units,
        },
    )


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
        raise ComponentError(str(exc)) from None
    view = qcnl_effective(text)
    if view["problems"]:
        raise ComponentError(f"the written {path} would not mean what was asked: {'; '.join(view['problems'])}")
    return ComponentPlan(
        files=[FileSpec(path, text, units=["qgsd.service", "qgsd-vsock.service"])],
        effective=view["settings"],
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
        raise ComponentError(str(exc)) from None
    config, problems = effective_config(default_text, text)
    if config is not None:
        problems += config_problems(config)
    if problems and params["validate"]:
        raise ComponentError(f"PCCS would not work with this configuration: {'; '.join(problems)}")
    return ComponentPlan(
        files=[
            FileSpec(
                production_path,
                text,
                owner=params["owner"] or "pccs",
                group=params["group"] or "pccs",
                mode=0o600,
                units=["pccs.service"],
                redact=lambda shown: jsonc.redact(shown, SECRET_PATHS),
            )
        ],
        effective=redact_config(config or {}),
        warnings=problems,
    )


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
        raise ComponentError(str(exc)) from None
    parsed = parse_mpa_conf(text)
    if parsed["invalid_lines"]:
        lines = ", ".join(f"line {number}: {line!r}" for number, line in parsed["invalid_lines"])
        raise ComponentError(f"{MPA_CONF} has lines the MPA rejects ({lines}); fix them first")
    effective = dict(parsed["settings"])
    if "subscription_key" in effective:
        effective["subscription_key"] = REDACTED
    return ComponentPlan(
        files=[FileSpec(MPA_CONF, text, mode=0o600, units=["mpa_registration_tool.service"], redact=redact_mpa)],
        effective=effective,
    )


PLANNERS = {"qgs": plan_qgs, "qcnl": plan_qcnl, "pccs": plan_pccs, "mpa": plan_mpa}
