# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""``qgsd.service`` as systemd merges it: the package's unit, Intel's own drop-in (DCAP 1.26+) and ours.

Merge rules (systemd.unit(5) "Description" and the unit search path; systemd v252 to v257, ``src/shared/dropin.c``
and ``src/basic/conf-files.c``):

* the unit file is the first ``qgsd.service`` on the system search path (``/etc/systemd/system`` before
  ``/run/systemd/system`` before ``/usr/local/lib``, ``/usr/lib`` and, on hosts without a merged ``/usr``,
  ``/lib/systemd/system``);
* drop-ins are every ``*.conf`` in ``qgsd.service.d/`` of every directory of that path; of several files with the
  same name only the one in the earliest directory counts; the survivors are applied in lexical order of their
  file names, whatever directory they are in. Intel's ``socket.conf`` (1.26: ``UMask=0117``; 1.27: ``0077``)
  therefore comes before ours, ``zz-confidential-tee.conf``, and an administrator's ``zzz-*.conf`` after it;
* a single-valued setting (``UMask=``, ``RuntimeDirectoryMode=``, ``User=``) takes the last assignment; a list
  setting (``RuntimeDirectory=``, ``ExecStartPre=``, ``ExecStartPost=``) accumulates, and an empty assignment
  empties it (systemd.syntax(7)); a line ending in a backslash continues on the next; ``#`` and ``;`` start
  comments. ``systemctl show qgsd`` (used by the check on a live host) is systemd's own answer to the same
  question.

:func:`unit_problems` then says whether the merged unit serves the consumers: the socket directory exists before
QGS starts and every client can search it, the umask leaves the QCNL cache directory usable, and the socket gets
the group and mode KubeVirt's QEMU (uid and gid 107 inside virt-launcher) needs.

Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ansible_collections.confidential.tee.plugins.module_utils.common.process import run_bounded

UNIT = "qgsd.service"
# systemd's system unit search path, highest priority first (systemd.unit(5), "Unit File Load Path").
SEARCH_PATH = (
    "etc/systemd/system.control",
    "run/systemd/system.control",
    "run/systemd/transient",
    "run/systemd/generator.early",
    "etc/systemd/system",
    "etc/systemd/system.attached",
    "run/systemd/system",
    "run/systemd/system.attached",
    "run/systemd/generator",
    "usr/local/lib/systemd/system",
    "usr/lib/systemd/system",
    "lib/systemd/system",
    "run/systemd/generator.late",
)
LIST_SETTINGS = frozenset(
    {"RuntimeDirectory", "ExecStartPre", "ExecStartPost", "ExecStart", "Environment", "SupplementaryGroups"}
)
# systemd's default umask for services (systemd.exec(5) UMask=).
DEFAULT_UMASK = 0o022
# The default RuntimeDirectoryMode= (systemd.exec(5)).
DEFAULT_RUNTIME_DIR_MODE = 0o755
MAX_UNIT_FILE = 1024 * 1024


@dataclass
class MergedUnit:
    """The ``[Service]`` settings as systemd ends up with them, with the file each last came from."""

    fragment: str | None
    dropins: list[str] = field(default_factory=list)
    settings: dict[str, list[str]] = field(default_factory=dict)
    origin: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def last(self, key: str) -> str | None:
        values = self.settings.get(key)
        return values[-1] if values else None


def parse_assignments(text: str, section: str = "Service") -> list[tuple[str, str]]:
    """``(key, value)`` of every assignment in ``[section]`` of one unit file or drop-in, in order."""
    out: list[tuple[str, str]] = []
    current = None
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip() if pending else raw.strip()
        pending = ""
        if not line or line[0] in "#;":
            continue
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        if line.startswith("[") and line.endswith("]"):
            current = line[1:-1]
            continue
        if current != section or "=" not in line:
            continue
        key, _equals, value = line.partition("=")
        out.append((key.strip(), value.strip()))
    return out


def _find_fragment(reader, unit: str) -> str | None:
    for directory in SEARCH_PATH:
        if reader.isfile(f"{directory}/{unit}"):
            return f"/{directory}/{unit}"
    return None


def _dropin_files(reader, unit: str) -> list[str]:
    """Drop-in paths in the order systemd applies them (same name: the earliest directory wins)."""
    chosen: dict[str, str] = {}
    for directory in SEARCH_PATH:
        for name in reader.listdir(f"{directory}/{unit}.d") or []:
            if name.endswith(".conf") and name not in chosen:
                chosen[name] = f"/{directory}/{unit}.d/{name}"
    return [chosen[name] for name in sorted(chosen)]


def merge_unit(reader, unit: str = UNIT, planned: dict[str, str | None] | None = None) -> MergedUnit:
    """``unit`` merged as systemd would, with ``planned`` files (path -> text, ``None``: removed) in place."""
    planned = planned or {}
    for path in planned:
        if not path.startswith("/etc/systemd/system/"):
            raise ValueError(f"planned unit files live under /etc/systemd/system, got {path}")

    def read(path: str) -> str | None:
        if path in planned:
            return planned[path]
        got = reader.read(path.lstrip("/"), limit=MAX_UNIT_FILE, record=False)
        return got.text("replace") if got.data is not None else None

    fragment = _find_fragment(reader, unit)
    merged = MergedUnit(fragment)
    dropins = set(_dropin_files(reader, unit))
    dropins |= {path for path, text in planned.items() if path.startswith(f"/etc/systemd/system/{unit}.d/") and text}
    dropins -= {path for path, text in planned.items() if text is None}
    by_name: dict[str, str] = {}
    for path in sorted(dropins, key=_priority):
        by_name.setdefault(path.rsplit("/", 1)[1], path)
    merged.dropins = [by_name[name] for name in sorted(by_name)]
    for path in ([fragment] if fragment else []) + merged.dropins:
        text = read(path)
        if text is None:
            merged.problems.append(f"{path} cannot be read")
            continue
        for key, value in parse_assignments(text):
            _assign(merged, key, value, path)
    return merged


def _priority(path: str) -> int:
    directory = path.lstrip("/").rsplit("/", 2)[0]
    return SEARCH_PATH.index(directory) if directory in SEARCH_PATH else len(SEARCH_PATH)


def _assign(merged: MergedUnit, key: str, value: str, path: str) -> None:
    if key in LIST_SETTINGS:
        if value == "":
            merged.settings[key] = []
        else:
            merged.settings.setdefault(key, []).extend(value.split() if key == "RuntimeDirectory" else [value])
    else:
        merged.settings[key] = [value]
    merged.origin[key] = path


def _octal(value: str | None, default: int) -> int | None:
    if value is None:
        return default
    try:
        return int(value, 8)
    except ValueError:
        return None


def unit_problems(merged: MergedUnit, transport: str, helper: str | None, kubevirt: bool) -> list[str]:
    """What stops the merged unit from serving its consumers, each naming the file that decided it."""
    problems = list(merged.problems)
    if merged.fragment is None:
        return [*problems, f"no {UNIT} on the systemd search path: the tdx-qgs package is not installed"]
    umask = _octal(merged.last("UMask"), DEFAULT_UMASK)
    where = merged.origin.get("UMask", "systemd's default")
    if umask is None:
        problems.append(f"UMask={merged.last('UMask')} (from {where}) is not an octal mode: systemd refuses it")
    elif umask & 0o100:
        problems.append(
            f"UMask={umask:04o} (from {where}) clears the owner search bit: qgsd cannot enter the QCNL cache "
            "directory it creates (~qgsd/.dcap-qcnl, drw-rw----), so every cache write fails (DCAP 1.26's "
            "socket.conf); a drop-in sorting after it must set UMask=0077"
        )
    if transport == "vsock":
        return problems
    if "tdx-qgs" not in merged.settings.get("RuntimeDirectory", []):
        problems.append(
            "no RuntimeDirectory=tdx-qgs: DCAP before 1.24 never creates /run/tdx-qgs and 1.24-1.25 create it 0700, "
            "which no client but qgsd can search"
        )
    else:
        mode = _octal(merged.last("RuntimeDirectoryMode"), DEFAULT_RUNTIME_DIR_MODE)
        origin = merged.origin.get("RuntimeDirectoryMode", "systemd's default")
        if mode is None or not mode & 0o001:
            problems.append(
                f"RuntimeDirectoryMode={merged.last('RuntimeDirectoryMode')} (from {origin}) leaves /run/tdx-qgs "
                "unsearchable for others: QEMU (uid 107 in virt-launcher, in no host group) cannot reach the socket"
            )
    if kubevirt and helper and not any(helper in line for line in merged.settings.get("ExecStartPost", [])):
        problems.append(
            f"no ExecStartPost running {helper}: the socket stays 0660 qgsd:qgsd (DCAP 1.26+), and QEMU in "
            "virt-launcher (uid/gid 107, whose groups come from the pod, not the host's /etc/group) cannot connect"
        )
    return problems


def systemd_view(timeout: float = 10.0) -> dict | None:
    """What the running systemd has loaded for ``qgsd.service`` (``systemctl show``), or ``None`` when unavailable.

    Only meaningful on the host's own root: it is systemd's answer, including whether the files on disk changed
    since the last ``daemon-reload`` (``NeedDaemonReload``), which the merge from the files cannot know."""
    argv = ["systemctl", "show", "-p", "UMask", "-p", "RuntimeDirectoryMode", "-p", "NeedDaemonReload", UNIT]
    try:
        completed = run_bounded(argv, timeout, limit=16 * 1024)
    except OSError:
        return None
    if completed.rc != 0:
        return None
    shown = {}
    for line in completed.stdout.decode("utf-8", "replace").splitlines():
        key, _equals, value = line.partition("=")
        shown[key.strip()] = value.strip()
    return shown if "UMask" in shown else None


def disagreement(merged: MergedUnit, shown: dict) -> str | None:
    """Why systemd's loaded unit differs from the files (``None`` when it agrees)."""
    if shown.get("NeedDaemonReload") == "yes":
        return "systemd has not loaded the unit files on disk yet (NeedDaemonReload=yes): systemctl daemon-reload"
    files = _octal(merged.last("UMask"), DEFAULT_UMASK)
    loaded = _octal(shown.get("UMask"), DEFAULT_UMASK)
    if files is not None and loaded is not None and files != loaded:
        return f"systemd runs qgsd with UMask={loaded:04o} although the files merge to {files:04o}"
    return None
