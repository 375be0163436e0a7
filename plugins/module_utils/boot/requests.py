# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""What a caller asks of the kernel command line: the ``requests`` option, checked and combined.

One request is one caller's (a role's) arguments to have present and absent, with the stem of its own GRUB
drop-in. Everything here is pure: no host is read. The boot setups (:mod:`boot.setups`) plan what the requests
need on a host; :mod:`boot.kernel_cmdline` is the entry that ties both together.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from ansible_collections.confidential.tee.plugins.module_utils.common.errors import TeeError
from ansible_collections.confidential.tee.plugins.module_utils.common.file_names import fits
from ansible_collections.confidential.tee.plugins.module_utils.common.validation import list_of_strings_problem
from ansible_collections.confidential.tee.plugins.module_utils.host.cmdline import Arg, parse_arg_text

DROPIN_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*\Z")
# Characters that would need shell escaping in a GRUB drop-in or are never part of a kernel argument.
UNSAFE_ARG_RE = re.compile(r"[\s'`$\\;&|<>()\"]")
REQUEST_KEYS = ("name", "present", "absent")


class CmdlineError(TeeError):
    """Bad input or an unsupported host layout; the message says what, where and how to fix it."""


def parse_arg(spec: object, where: str = "argument") -> Arg:
    """Validate one requested argument (``name`` or ``name=value``)."""
    if not isinstance(spec, str):
        raise CmdlineError(f"{where} {spec!r} is a {type(spec).__name__}, expected a string like 'name=value'")
    if not spec or spec != spec.strip():
        raise CmdlineError(f"{where} {spec!r} is empty or has surrounding whitespace")
    if spec == "--":
        raise CmdlineError(f"{where} '--' separates init arguments and cannot be managed")
    if UNSAFE_ARG_RE.search(spec):
        # Requests are written into shell (GRUB drop-ins) and argv lists: keep them to plain tokens.
        raise CmdlineError(
            f"{where} {spec!r} contains whitespace, quotes or shell metacharacters; kernel arguments "
            "managed here must be single plain tokens such as 'kvm_intel.tdx=1'"
        )
    arg = parse_arg_text(spec)
    if not arg.name or arg.name.startswith("="):
        raise CmdlineError(f"{where} {spec!r} has no name before '='")
    return arg


@dataclass
class Request:
    """One caller's arguments (a role's), with the stem of its own GRUB drop-in."""

    name: str
    present: list[Arg]
    absent: list[Arg]


def parse_request(present: list, absent: list, where: str = "") -> tuple[list[Arg], list[Arg]]:
    want = [parse_arg(p, f"{where}present argument") for p in present]
    drop = [parse_arg(a, f"{where}absent argument") for a in absent]
    clash = {t.key for t in want} & {t.key for t in drop if t.value is None}
    if clash:
        raise CmdlineError(f"{where}{', '.join(sorted(clash))} requested both present and absent")
    return want, drop


def check_name(name: str, where: str = "name") -> None:
    if not isinstance(name, str) or not DROPIN_NAME_RE.match(name):
        raise CmdlineError(f"{where} {name!r} must be a file-name stem (letters, digits, '.', '_', '-')")
    if not fits(name + ".cfg"):
        raise CmdlineError(
            f"{where} {name[:40]!r}... has {len(name)} characters: the drop-in {name[:8]}....cfg must fit a file "
            "name (255 bytes, NAME_MAX); choose a shorter name"
        )


def parse_requests(raw: object) -> list[Request]:
    """Validate the ``requests`` option: a non-empty list of ``{name, present, absent}`` with distinct names."""
    if not isinstance(raw, list) or not raw:
        raise CmdlineError("requests must be a non-empty list of {name, present, absent} dictionaries")
    requests: list[Request] = []
    for index, item in enumerate(raw):
        where = f"requests[{index}]"
        if not isinstance(item, dict) or "name" not in item or set(item) - set(REQUEST_KEYS):
            raise CmdlineError(f"{where} must be a dictionary with the keys name (required), present and absent")
        check_name(item["name"], f"{where}.name")
        where = f"requests[{index}] ({item['name']}): "
        for option in ("present", "absent"):
            problem = list_of_strings_problem(f"{where}{option}", item.get(option) or [])
            if problem:
                raise CmdlineError(problem)
        want, drop = parse_request(item.get("present") or [], item.get("absent") or [], where)
        requests.append(Request(item["name"], want, drop))
    names = Counter(request.name for request in requests)
    twice = sorted(name for name, count in names.items() if count > 1)
    if twice:
        raise CmdlineError(f"requests name the drop-in {', '.join(twice)} more than once: give each its own name")
    combine(requests)
    return requests


def _disagreement(wanting: Request, other: Request) -> str | None:
    """Why two requests cannot both be met (``other`` removes or sets differently what ``wanting`` wants), or None."""
    for want in wanting.present:
        for theirs in other.present:
            if want.key == theirs.key and not want.same_setting(theirs):
                return f"{wanting.name} wants {want.raw} but {other.name} wants {theirs.raw}"
        for drop in other.absent:
            if want.key == drop.key and drop.value in (None, want.value):
                return f"{wanting.name} wants {want.raw} present but {other.name} wants {drop.raw} absent"
    return None


def combine(requests: list[Request]) -> tuple[list[Arg], list[Arg]]:
    """Every request's arguments as one request; requests that contradict each other are refused."""
    problems = []
    for i, first in enumerate(requests):
        for second in requests[i + 1 :]:
            problem = _disagreement(wanting=first, other=second) or _disagreement(wanting=second, other=first)
            problems += [problem] if problem else []
    if problems:
        raise CmdlineError(f"the requests contradict each other: {'; '.join(problems)}; nothing was changed")
    present: list[Arg] = []
    absent: list[Arg] = []
    for request in requests:
        present += [arg for arg in request.present if not any(arg.same_setting(seen) for seen in present)]
        absent += [arg for arg in request.absent if arg.raw not in [seen.raw for seen in absent]]
    return present, absent
