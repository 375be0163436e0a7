# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""Render OpenShift MachineConfig manifests: kernel arguments plus Ignition 3.x files.

Pure standard library: used by the ``confidential.tee.machineconfig`` filter (on the controller) and by
tests that validate the output against the real MachineConfig CRD.
"""

from __future__ import annotations

import re
import urllib.parse

from ansible_collections.confidential.tee.plugins.module_utils.common.errors import TeeError

API_VERSION = "machineconfiguration.openshift.io/v1"
ROLE_LABEL = "machineconfiguration.openshift.io/role"
# MCO accepts Ignition spec 3.x configs; 3.2.0 is understood by every supported OpenShift 4 release.
IGNITION_VERSION = "3.2.0"
NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?\Z")
ROLE_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z")


class MachineConfigError(TeeError):
    """Input that cannot become a valid MachineConfig; the message says which field and why."""


def data_url(content: str) -> str:
    """RFC 2397 data URL as Ignition reads it (percent-encoded, no media type)."""
    return "data:," + urllib.parse.quote(content, safe="")


def file_entry(path: str, contents: str, mode: int = 0o644) -> dict:
    if not isinstance(path, str) or not path.startswith("/"):
        raise MachineConfigError(f"file path {path!r} must be absolute")
    if not isinstance(contents, str):
        raise MachineConfigError(f"contents of {path} must be a string, got {type(contents).__name__}")
    if isinstance(mode, str):
        mode = int(mode, 8)
    if not isinstance(mode, int) or isinstance(mode, bool) or not 0 <= mode <= 0o7777:
        raise MachineConfigError(f"mode of {path} must be a permission number such as 0o644, got {mode!r}")
    # Ignition takes the mode as a decimal integer: 0o644 is written as 420.
    return {"path": path, "mode": mode, "overwrite": True, "contents": {"source": data_url(contents)}}


def render(name: str, role: str, kernel_arguments=(), files=(), labels=None) -> dict:
    """One MachineConfig for the pool ``role``; ``files`` items are dicts with path, contents, mode."""
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise MachineConfigError(
            f"name {name!r} is not a valid Kubernetes object name (lowercase, digits, '-', '.')", option="role"
        )
    if not isinstance(role, str) or not ROLE_RE.match(role):
        raise MachineConfigError(
            f"role {role!r} is not a valid MachineConfigPool role such as worker or master (at most 63 characters: "
            "a-z, 0-9 and '-', starting and ending with a letter or digit)",
            option="role",
        )
    args = list(kernel_arguments or [])
    for arg in args:
        if not isinstance(arg, str) or not arg or any(c.isspace() for c in arg):
            raise MachineConfigError(f"kernel argument {arg!r} must be one non-empty token without spaces")
    entries = []
    for item in files or []:
        if not isinstance(item, dict) or "path" not in item or "contents" not in item:
            raise MachineConfigError(f"file {item!r} needs 'path' and 'contents'")
        entries.append(file_entry(item["path"], item["contents"], item.get("mode", 0o644)))
    config: dict = {"ignition": {"version": IGNITION_VERSION}}
    if entries:
        config["storage"] = {"files": entries}
    spec: dict = {"config": config}
    if args:
        spec["kernelArguments"] = args
    return {
        "apiVersion": API_VERSION,
        "kind": "MachineConfig",
        "metadata": {"name": name, "labels": {**(labels or {}), ROLE_LABEL: role}},
        "spec": spec,
    }


def ignition_problems(config: object) -> list[str]:
    """Shape checks of the Ignition part (the CRD leaves spec.config schemaless)."""
    problems: list[str] = []
    if not isinstance(config, dict):
        return ["spec.config must be a mapping"]
    version = config.get("ignition", {}).get("version") if isinstance(config.get("ignition"), dict) else None
    if not isinstance(version, str) or not re.fullmatch(r"3\.\d+\.\d+", version):
        problems.append(f"ignition.version must be 3.x.y, got {version!r}")
    storage = config.get("storage", {})
    files = storage.get("files", []) if isinstance(storage, dict) else None
    if not isinstance(files, list):
        return [*problems, "storage.files must be a list"]
    for idx, entry in enumerate(files):
        where = f"storage.files[{idx}]"
        if not isinstance(entry, dict):
            problems.append(f"{where} must be a mapping")
            continue
        if not isinstance(entry.get("path"), str) or not entry["path"].startswith("/"):
            problems.append(f"{where}.path must be an absolute path")
        mode = entry.get("mode")
        if not isinstance(mode, int) or isinstance(mode, bool) or not 0 <= mode <= 0o7777:
            problems.append(f"{where}.mode must be a decimal integer permission (420 for 0644), got {mode!r}")
        source = entry.get("contents", {}).get("source") if isinstance(entry.get("contents"), dict) else None
        if not isinstance(source, str) or not source.startswith("data:"):
            problems.append(f"{where}.contents.source must be a data URL")
    return problems


def decode_data_url(source: str) -> str:
    header, _sep, payload = source.partition(",")
    if header.endswith(";base64"):
        import base64

        return base64.b64decode(payload).decode()
    return urllib.parse.unquote(payload)
