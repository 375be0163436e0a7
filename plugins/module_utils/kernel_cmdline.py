# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""Kernel-argument engine: token parsing and editing, boot-setup detection, action planning.

Pure standard library so that the module, the simulator and tests share one implementation. Nothing here
writes or runs anything by itself: :func:`plan` returns :class:`Action` objects and :class:`Executor` is
the single place where they are applied (and only outside check mode).
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
import time
from dataclasses import dataclass, field

SETUPS = ("grub", "bls", "kernel_install", "ostree")
BIN_DIRS = ("usr/local/sbin", "usr/local/bin", "usr/sbin", "usr/bin", "sbin", "bin")
GRUB_VARS = ("GRUB_CMDLINE_LINUX", "GRUB_CMDLINE_LINUX_DEFAULT")
DROPIN_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
# Characters that would need shell escaping in a GRUB drop-in or are never part of a kernel argument.
UNSAFE_ARG_RE = re.compile(r"[\s'`$\\;&|<>()]")


class CmdlineError(Exception):
    """Bad input or an unsupported host layout; the message says what, where and how to fix it."""


@dataclass(frozen=True)
class Token:
    raw: str
    name: str
    value: str | None
    start: int = 0
    end: int = 0

    @property
    def key(self) -> str:
        return arg_key(self.name)

    def same_setting(self, other: Token) -> bool:
        return self.key == other.key and self.value == other.value


def arg_key(name: str) -> str:
    # The kernel (parameq) and modprobe treat '-' and '_' alike in module parameters ("kvm-intel.tdx");
    # plain __setup names such as "intel_iommu" are compared byte for byte.
    return name.replace("-", "_") if "." in name else name


def split_cmdline(text: str) -> list[Token]:
    """Split like the kernel's next_arg(): whitespace outside double quotes separates arguments.

    Spans index into ``text`` so that edits can leave every other byte untouched. An unterminated quote
    runs to the end of the text, as in the kernel.
    """
    tokens: list[Token] = []
    i, n = 0, len(text)
    while i < n:
        if text[i].isspace():
            i += 1
            continue
        start, in_quote = i, False
        while i < n and (in_quote or not text[i].isspace()):
            if text[i] == '"':
                in_quote = not in_quote
            i += 1
        tokens.append(_token(text[start:i], start, i))
    return tokens


def _token(raw: str, start: int = 0, end: int = 0) -> Token:
    body = raw[1:] if raw.startswith('"') else raw
    name, sep, value = body.partition("=")
    if not sep:
        return Token(raw, name.rstrip('"'), None, start, end)
    if value.startswith('"'):
        value = value[1:]
    if value.endswith('"'):
        value = value[:-1]
    return Token(raw, name, value, start, end)


def parse_arg(spec: object, where: str = "argument") -> Token:
    """Validate one requested argument (``name`` or ``name=value``)."""
    if not isinstance(spec, str):
        raise CmdlineError(f"{where} {spec!r} is a {type(spec).__name__}, expected a string like 'name=value'")
    if not spec or spec != spec.strip():
        raise CmdlineError(f"{where} {spec!r} is empty or has surrounding whitespace")
    if spec == "--":
        raise CmdlineError(f"{where} '--' separates init arguments and cannot be managed")
    if UNSAFE_ARG_RE.search(spec) or '"' in spec:
        # Requests are written into shell (GRUB drop-ins) and argv lists: keep them to plain tokens.
        raise CmdlineError(
            f"{where} {spec!r} contains whitespace, quotes or shell metacharacters; kernel arguments "
            "managed here must be single plain tokens such as 'kvm_intel.tdx=1'"
        )
    token = _token(spec)
    if not token.name:
        raise CmdlineError(f"{where} {spec!r} has no name before '='")
    return token


@dataclass
class EditPlan:
    deletes: set[int] = field(default_factory=set)
    replaces: dict[int, str] = field(default_factory=dict)
    inserts: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.deletes or self.replaces or self.inserts)


def _kernel_part(tokens: list[Token]) -> list[Token]:
    # Everything after a bare "--" belongs to init and is never matched or edited.
    for idx, tok in enumerate(tokens):
        if tok.raw == "--":
            return tokens[:idx]
    return tokens


def plan_edits(tokens: list[Token], present: list[Token], absent: list[Token]) -> EditPlan:
    """Decide per token what to do; ``present`` makes a name single-valued with the requested value."""
    edit = EditPlan()
    kernel = _kernel_part(tokens)
    for spec in absent:
        for idx, tok in enumerate(kernel):
            if tok.key == spec.key and (spec.value is None or tok.value == spec.value):
                edit.deletes.add(idx)
    for spec in present:
        matches = [i for i, t in enumerate(kernel) if t.key == spec.key and i not in edit.deletes]
        if matches and all(kernel[i].same_setting(spec) for i in matches):
            continue
        equal = [i for i in matches if kernel[i].same_setting(spec)]
        if equal:
            edit.deletes.update(i for i in matches if i != equal[0])
        elif matches:
            edit.replaces[matches[0]] = spec.raw
            edit.deletes.update(matches[1:])
        else:
            edit.inserts.append(spec.raw)
    return edit


def apply_to_list(tokens: list[Token], edit: EditPlan) -> list[str]:
    kernel_len = len(_kernel_part(tokens))
    out = [edit.replaces.get(i, t.raw) for i, t in enumerate(tokens[:kernel_len]) if i not in edit.deletes]
    return out + edit.inserts + [t.raw for t in tokens[kernel_len:]]


def apply_to_text(text: str, tokens: list[Token], edit: EditPlan) -> str:
    """Apply an edit to the text the tokens came from, leaving every untouched byte where it was."""
    if edit.empty:
        return text
    ops: list[tuple[int, int, str]] = []  # (start, end, replacement)
    kept = [i for i in range(len(tokens)) if i not in edit.deletes]
    first_kept = kept[0] if kept else None
    for i in sorted(edit.deletes):
        if first_kept is None:
            ops.append((tokens[0].start if i == 0 else tokens[i - 1].end, tokens[i].end, ""))
        elif i < first_kept:
            ops.append((tokens[i].start, tokens[i + 1].start, ""))
        else:
            ops.append((tokens[i - 1].end, tokens[i].end, ""))
    for i, raw in edit.replaces.items():
        ops.append((tokens[i].start, tokens[i].end, raw))
    if edit.inserts:
        kernel = _kernel_part(tokens)
        added = " ".join(edit.inserts)
        if kernel:
            ops.append((kernel[-1].end, kernel[-1].end, " " + added))
        elif tokens:  # only "--" and init arguments
            ops.append((tokens[0].start, tokens[0].start, added + " "))
        else:
            pos = len(text.rstrip("\r\n"))
            ops.append((pos, pos, added))
    for start, end, repl in sorted(ops, key=lambda op: (op[0], op[1]), reverse=True):
        text = text[:start] + repl + text[end:]
    return text


def edit_cmdline(text: str, present: list[Token], absent: list[Token]) -> str:
    tokens = split_cmdline(text)
    return apply_to_text(text, tokens, plan_edits(tokens, present, absent))


def satisfied(raws: list[str], present: list[Token], absent: list[Token]) -> bool:
    tokens = _kernel_part([_token(r) for r in raws])
    for spec in present:
        matches = [t for t in tokens if t.key == spec.key]
        if not matches or not all(t.same_setting(spec) for t in matches):
            return False
    return not any(
        t.key == spec.key and (spec.value is None or t.value == spec.value) for spec in absent for t in tokens
    )


# ------------------------------------------------------------------------------------------ host files


def host_path(host_root: str, path: str) -> str:
    return os.path.join(host_root, path.lstrip("/"))


def read_text(host_root: str, path: str) -> str | None:
    full = host_path(host_root, path)
    try:
        with open(full, encoding="utf-8", errors="surrogateescape") as handle:
            return handle.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CmdlineError(f"cannot read {full}: {exc.strerror}; check permissions or host_root") from exc


def list_dir(host_root: str, path: str, suffix: str) -> list[str]:
    full = host_path(host_root, path)
    try:
        names = os.listdir(full)
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        raise CmdlineError(f"cannot list {full}: {exc.strerror}") from exc
    return sorted(f"{path.rstrip('/')}/{n}" for n in names if n.endswith(suffix))


def find_tool(host_root: str, *names: str) -> str | None:
    """Host path (as seen from inside host_root) of the first tool found, or None."""
    for name in names:
        for directory in BIN_DIRS:
            candidate = host_path(host_root, f"{directory}/{name}")
            if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                return f"/{directory}/{name}"
    return None


def detect_setup(host_root: str) -> tuple[str | None, list[str]]:
    """Pick the boot setup from the files present; also return what was looked at, for error messages."""
    found: list[str] = []
    ostree = os.path.exists(host_path(host_root, "/run/ostree-booted"))
    entries = list_dir(host_root, "/boot/loader/entries", ".conf")
    grubby = find_tool(host_root, "grubby")
    grub_default = os.path.isfile(host_path(host_root, "/etc/default/grub"))
    kernel_cmdline = os.path.isfile(host_path(host_root, "/etc/kernel/cmdline"))
    found.append("/run/ostree-booted " + ("present" if ostree else "absent"))
    found.append(f"/boot/loader/entries: {len(entries)} *.conf")
    found.append("grubby " + (grubby or "not found"))
    found.append("/etc/default/grub " + ("present" if grub_default else "absent"))
    found.append("/etc/kernel/cmdline " + ("present" if kernel_cmdline else "absent"))
    if ostree:
        return "ostree", found
    if entries and grubby:
        return "bls", found
    if grub_default:
        return "grub", found
    if kernel_cmdline:
        return "kernel_install", found
    return None, found


# ------------------------------------------------------------------------------------------ actions


@dataclass
class Action:
    kind: str  # "write", "remove" or "command"
    description: str
    path: str | None = None
    content: str | None = None
    mode: int = 0o644
    argv: list[str] | None = None
    before: str | None = None
    backs_up: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        out: dict = {"kind": self.kind, "description": self.description}
        if self.path is not None:
            out["path"] = self.path
        if self.argv is not None:
            out["argv"] = list(self.argv)
        return out


@dataclass
class Plan:
    setup: str
    actions: list[Action]
    before: list[str]
    configured: list[str]
    source: str
    warnings: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.actions)


def write_action(path: str, before: str | None, after: str, what: str) -> Action | None:
    if before == after:
        return None
    verb = "create" if before is None else "update"
    return Action("write", f"{verb} {path} ({what})", path=path, content=after, before=before)


# ------------------------------------------------------------------------------------------ GRUB


@dataclass
class GrubLine:
    path: str
    lineno: int
    var: str
    line_start: int  # offset of the line in its file
    value_start: int  # offset of the editable argument text within the line
    value: str  # argument text (after any "$VAR " self-reference)
    appends: bool
    opaque: bool  # contains shell we do not evaluate: never edited


ASSIGN_RE = re.compile(r"^(?P<lead>\s*(?:export\s+)?)(?P<var>GRUB_CMDLINE_LINUX(?:_DEFAULT)?)=(?P<rest>.*)$")


def _grub_assignment(path: str, lineno: int, offset: int, line: str) -> GrubLine | None:
    match = ASSIGN_RE.match(line)
    if not match:
        return None
    var, rest = match.group("var"), match.group("rest")
    base = match.start("rest")
    quote = rest[:1] if rest[:1] in "\"'" else ""
    if quote:
        close = rest.find(quote, 1)
        opaque = close < 0
        body = rest[1:close] if close > 0 else rest[1:]
        tail = rest[close + 1 :] if close > 0 else ""
        base += 1
    else:
        body, _sep, tail = rest.partition(" ")
        opaque = False
    opaque = opaque or not re.fullmatch(r"\s*(#.*)?", tail)
    appends = False
    for prefix in (f"${{{var}}}", f"${var}"):
        if quote != "'" and body.startswith(prefix) and (len(body) == len(prefix) or body[len(prefix)] == " "):
            appends = True
            base += len(prefix)
            body = body[len(prefix) :]
            break
    if quote != "'" and re.search(r"[$`\\]", body):
        opaque = True
    return GrubLine(path, lineno, var, offset, base, body, appends, opaque)


def _grub_lines(path: str, text: str) -> list[GrubLine]:
    out, offset = [], 0
    for lineno, line in enumerate(text.splitlines(keepends=True), start=1):
        parsed = _grub_assignment(path, lineno, offset, line.rstrip("\r\n"))
        if parsed:
            out.append(parsed)
        offset += len(line)
    return out


def grub_effective(files: list[tuple[str, str]]) -> list[tuple[GrubLine, Token]]:
    """Live (line, token) pairs of GRUB_CMDLINE_LINUX then GRUB_CMDLINE_LINUX_DEFAULT, in sourcing order."""
    live: dict[str, list[tuple[GrubLine, Token]]] = {var: [] for var in GRUB_VARS}
    for path, text in files:
        for line in _grub_lines(path, text):
            pairs = [(line, tok) for tok in split_cmdline(line.value)]
            live[line.var] = (live[line.var] if line.appends else []) + pairs
    return live[GRUB_VARS[0]] + live[GRUB_VARS[1]]


def dropin_text(name: str, raws: list[str]) -> str:
    return (
        f"# Managed by confidential.tee.kernel_cmdline ({name}); changes here are overwritten.\n"
        "# Extends the kernel command line of every GRUB entry; run update-grub after editing.\n"
        f'GRUB_CMDLINE_LINUX="${{GRUB_CMDLINE_LINUX}} {" ".join(raws)}"\n'
    )


def plan_grub(host_root: str, present: list[Token], absent: list[Token], name: str) -> Plan:
    main = read_text(host_root, "/etc/default/grub")
    if main is None:
        raise CmdlineError(f"boot setup 'grub' needs {host_path(host_root, '/etc/default/grub')}, which is missing")
    dropin = f"/etc/default/grub.d/{name}.cfg"
    paths = list_dir(host_root, "/etc/default/grub.d", ".cfg")
    if dropin not in paths:
        paths = sorted([*paths, dropin])
    texts = {"/etc/default/grub": main}
    for path in paths:
        texts[path] = read_text(host_root, path) or ""
    order = ["/etc/default/grub", *paths]
    live = grub_effective([(p, texts[p]) for p in order])
    before = [tok.raw for _line, tok in live]

    had_own = any(line.path == dropin for line, _tok in live)
    edit = plan_edits([tok for _line, tok in live], present, absent)
    # Our drop-in keeps its surviving arguments in place and receives every added or replaced value;
    # conflicting arguments written elsewhere are removed where they are written.
    new_own: list[str] = []
    moved: list[str] = []
    per_line: dict[tuple[str, int], set[int]] = {}
    for idx, (line, tok) in enumerate(live):
        changed = idx in edit.deletes or idx in edit.replaces
        if line.path == dropin:
            if idx in edit.replaces:
                new_own.append(edit.replaces[idx])
            elif not changed:
                new_own.append(tok.raw)
            continue
        if idx in edit.replaces:
            moved.append(edit.replaces[idx])
        if not changed:
            continue
        if line.opaque:
            raise CmdlineError(
                f"{line.path}:{line.lineno} sets {line.var} with shell this module does not evaluate, "
                f"and its argument {tok.raw!r} must change; edit that line by hand or move the argument "
                "to a plain quoted assignment"
            )
        index = next(i for i, t in enumerate(split_cmdline(line.value)) if t.start == tok.start)
        per_line.setdefault((line.path, line.lineno), set()).add(index)
    new_own += moved + edit.inserts

    new_texts = dict(texts)
    for (path, lineno), deletes in per_line.items():
        new_texts[path] = _edit_grub_line(new_texts[path], path, lineno, deletes)
    if new_own:
        new_texts[dropin] = dropin_text(name, new_own)
    elif had_own:
        new_texts[dropin] = ""

    actions: list[Action] = []
    for path in order:
        if new_texts[path] == texts[path]:
            continue
        existed = os.path.exists(host_path(host_root, path))
        if path == dropin and not new_own:
            actions.append(
                Action("remove", f"remove {path} (no managed arguments left)", path=path, before=texts[path])
            )
        else:
            action = write_action(path, texts[path] if existed else None, new_texts[path], "GRUB_CMDLINE_LINUX")
            actions.append(action)
    configured = [tok.raw for _line, tok in grub_effective([(p, new_texts[p]) for p in order])]
    plan = Plan("grub", actions, before, configured, "GRUB_CMDLINE_LINUX + GRUB_CMDLINE_LINUX_DEFAULT")
    if actions and not satisfied(configured, present, absent):
        overriding = [
            f"{ln.path}:{ln.lineno}"
            for ln in _all_lines([(p, new_texts[p]) for p in order])
            if not ln.appends and order.index(ln.path) > order.index(dropin)
        ]
        raise CmdlineError(
            f"after writing {dropin} the GRUB command line would still not hold the requested arguments: "
            f"{', '.join(overriding) or 'a later assignment'} replaces GRUB_CMDLINE_LINUX without "
            "extending it; "
            "choose a drop-in name that sorts after it or make that line extend the variable"
        )
    if actions:
        tool = find_tool(host_root, "update-grub")
        argv = [tool] if tool else None
        if not tool:
            mkconfig = find_tool(host_root, "grub-mkconfig", "grub2-mkconfig")
            if mkconfig:
                out = "/boot/grub2/grub.cfg" if mkconfig.endswith("grub2-mkconfig") else "/boot/grub/grub.cfg"
                argv = [mkconfig, "-o", out]
        if argv:
            actions.append(Action("command", "regenerate the GRUB configuration", argv=argv))
        else:
            plan.warnings.append(
                "neither update-grub nor grub-mkconfig was found under host_root; the new arguments reach "
                "the boot menu only after the GRUB configuration is regenerated"
            )
    return plan


def _all_lines(files: list[tuple[str, str]]) -> list[GrubLine]:
    return [line for path, text in files for line in _grub_lines(path, text)]


def _edit_grub_line(text: str, path: str, lineno: int, deletes: set[int]) -> str:
    line = next(ln for ln in _grub_lines(path, text) if ln.lineno == lineno)
    tokens = split_cmdline(line.value)
    new_value = apply_to_text(line.value, tokens, EditPlan(deletes=deletes))
    start = line.line_start + line.value_start
    return text[:start] + new_value + text[start + len(line.value) :]


# ------------------------------------------------------------------------------------------ BLS


def _bls_options(text: str, grubenv: str | None) -> str:
    options = ""
    for line in text.splitlines():
        key, _sep, value = line.strip().partition(" ")
        if key == "options":
            options = value.strip()
    if "$kernelopts" in options and grubenv:
        # RHEL 8 keeps the shared arguments in grubenv and references them from each entry.
        for line in grubenv.splitlines():
            if line.startswith("kernelopts="):
                options = options.replace("$kernelopts", line.partition("=")[2].strip())
    return options


def plan_bls(host_root: str, present: list[Token], absent: list[Token]) -> Plan:
    entries = list_dir(host_root, "/boot/loader/entries", ".conf")
    if not entries:
        raise CmdlineError(f"boot setup 'bls' needs entries in {host_path(host_root, '/boot/loader/entries')}")
    grubenv = read_text(host_root, "/boot/grub2/grubenv")
    per_entry = {p: split_cmdline(_bls_options(read_text(host_root, p) or "", grubenv)) for p in entries}
    remove: list[str] = []
    add: list[str] = []
    for tokens in per_entry.values():
        kernel = _kernel_part(tokens)
        for spec in absent:
            if any(t.key == spec.key and spec.value in (None, t.value) for t in kernel) and spec.raw not in remove:
                remove.append(spec.raw)
        for spec in present:
            matches = [t for t in kernel if t.key == spec.key]
            if matches and all(t.same_setting(spec) for t in matches):
                continue
            # Removing by name first leaves exactly one value once --args adds the requested one.
            if matches and spec.name not in remove:
                remove.append(spec.name)
            if spec.raw not in add:
                add.append(spec.raw)
    newest = entries[-1]  # Fedora/RHEL entry names sort by kernel version
    tool = find_tool(host_root, "grubby") or "/usr/sbin/grubby"
    actions = []
    if remove:
        argv = [tool, "--update-kernel=ALL", f"--remove-args={' '.join(remove)}"]
        actions.append(Action("command", f"remove {' '.join(remove)} from every boot entry", argv=argv))
    if add:
        argv = [tool, "--update-kernel=ALL", f"--args={' '.join(add)}"]
        actions.append(Action("command", f"add {' '.join(add)} to every boot entry", argv=argv))
    for action in actions:
        # grubby rewrites the entries (and on RHEL /etc/default/grub) itself: keep copies first.
        action.backs_up = [*entries, "/etc/default/grub"]
    tokens = per_entry[newest]
    after = apply_to_list(tokens, plan_edits(tokens, present, absent))
    source = f"options of {newest} (grubby updates all {len(entries)} entries)"
    return Plan("bls", actions, [t.raw for t in tokens], after, source)


# ------------------------------------------------------------------------------------------ kernel-install


def plan_kernel_install(host_root: str, present: list[Token], absent: list[Token]) -> Plan:
    path = "/etc/kernel/cmdline"
    text = read_text(host_root, path)
    if text is None:
        raise CmdlineError(f"boot setup 'kernel_install' needs {host_path(host_root, path)}, which is missing")
    new = edit_cmdline(text, present, absent)
    if new and not new.endswith("\n"):
        new += "\n" if text.endswith("\n") or not text else ""
    before = [t.raw for t in split_cmdline(text)]
    after = [t.raw for t in split_cmdline(new)]
    action = write_action(path, text, new, "kernel-install command line")
    plan = Plan("kernel_install", [action] if action else [], before, after, path)
    if action:
        release = (read_text(host_root, "/proc/sys/kernel/osrelease") or "").strip()
        tool = find_tool(host_root, "kernel-install")
        image = next(
            (
                f"/{d}/{release}/vmlinuz"
                for d in ("usr/lib/modules", "lib/modules")
                if release and os.path.isfile(host_path(host_root, f"/{d}/{release}/vmlinuz"))
            ),
            None,
        )
        if tool and image:
            plan.actions.append(
                Action("command", f"regenerate the boot entry of {release}", argv=[tool, "add", release, image])
            )
        else:
            plan.warnings.append(
                f"{path} is read when a kernel is installed; no kernel-install or vmlinuz for the running "
                f"kernel {release or '(unknown)'} was found, so run 'kernel-install add' or reinstall the "
                "kernel for the change to reach the boot entry"
            )
    return plan


# ------------------------------------------------------------------------------------------ ostree / bootc


def plan_ostree(host_root: str, present: list[Token], absent: list[Token]) -> Plan:
    entries = list_dir(host_root, "/boot/loader/entries", ".conf")
    current: list[Token] = []
    best = -1
    for path in entries:
        text = read_text(host_root, path) or ""
        version = re.search(r"^version\s+(\d+)", text, re.M)
        number = int(version.group(1)) if version else 0
        if number > best:
            best, current = number, split_cmdline(_bls_options(text, None))
    edit = plan_edits(current, present, absent)
    after = apply_to_list(current, edit)
    args: list[str] = [f"--delete-if-present={current[i].raw}" for i in sorted(edit.deletes | set(edit.replaces))]
    args += [f"--append-if-missing={raw}" for raw in [*edit.replaces.values(), *edit.inserts]]
    plan = Plan("ostree", [], [t.raw for t in current], after, "default ostree deployment")
    if args:
        tool = find_tool(host_root, "rpm-ostree")
        if tool is None:
            bootc = find_tool(host_root, "bootc")
            hint = (
                "bootc hosts take kernel arguments from the image: add "
                f"/usr/lib/bootc/kargs.d/50-tee.toml with kargs = {[t.raw for t in present]!r} "
                "to the image build, or render a MachineConfig instead"
                if bootc
                else "install rpm-ostree or manage this host through its image"
            )
            raise CmdlineError(f"ostree host without rpm-ostree: {hint}")
        plan.actions.append(
            Action("command", "stage kernel arguments for the next deployment", argv=[tool, "kargs", *args])
        )
    return plan


# ------------------------------------------------------------------------------------------ entry points


def plan(
    host_root: str, present: list[str], absent: list[str], name: str = "confidential-tee", setup: str = "auto"
) -> Plan:
    """Parse the request, detect (or check) the boot setup and plan the actions."""
    if not DROPIN_NAME_RE.match(name or ""):
        raise CmdlineError(f"name {name!r} must be a file-name stem (letters, digits, '.', '_', '-')")
    want = [parse_arg(p, "present argument") for p in present]
    drop = [parse_arg(a, "absent argument") for a in absent]
    clash = {t.key for t in want} & {t.key for t in drop if t.value is None}
    if clash:
        raise CmdlineError(f"{', '.join(sorted(clash))} requested both present and absent")
    if setup == "auto":
        detected, found = detect_setup(host_root)
        if detected is None:
            raise CmdlineError(
                f"no supported boot setup under host_root {host_root}: found {'; '.join(found)}. Supported: "
                "ostree/bootc (/run/ostree-booted), BLS with grubby, Debian/Ubuntu GRUB (/etc/default/grub), "
                "kernel-install (/etc/kernel/cmdline); set boot_setup explicitly if detection is wrong"
            )
        setup = detected
    if setup == "grub":
        return plan_grub(host_root, want, drop, name)
    if setup == "bls":
        return plan_bls(host_root, want, drop)
    if setup == "kernel_install":
        return plan_kernel_install(host_root, want, drop)
    if setup == "ostree":
        return plan_ostree(host_root, want, drop)
    raise CmdlineError(f"unknown boot setup {setup!r}; choose one of auto, {', '.join(SETUPS)}")


def running_cmdline(host_root: str) -> list[str] | None:
    text = read_text(host_root, "/proc/cmdline")
    return None if text is None else [t.raw for t in split_cmdline(text)]


def reboot_required(running: list[str] | None, present: list[str], absent: list[str]) -> bool:
    """True when the running kernel does not have what was requested (configured differs from running)."""
    if running is None:
        return False
    return not satisfied(running, [parse_arg(p) for p in present], [parse_arg(a) for a in absent])


# ------------------------------------------------------------------------------------------ execution


def atomic_write(full_path: str, content: str, default_mode: int = 0o644) -> None:
    """Write via a temporary file in the same directory and rename, keeping mode and owner."""
    directory = os.path.dirname(full_path) or "."
    os.makedirs(directory, exist_ok=True)
    try:
        st = os.stat(full_path)
        mode, owner = stat.S_IMODE(st.st_mode), (st.st_uid, st.st_gid)
    except FileNotFoundError:
        mode, owner = default_mode, None
    fd, tmp = tempfile.mkstemp(prefix=".tee-", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as handle:
            handle.write(content)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        if owner is not None and os.geteuid() == 0:
            os.chown(tmp, *owner)
        os.replace(tmp, full_path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def backup_file(full_path: str, stamp: str) -> str | None:
    """Copy an existing file next to itself; the suffix keeps it out of *.cfg / *.conf globs."""
    if not os.path.isfile(full_path):
        return None
    dest, n = f"{full_path}.{stamp}~", 1
    # Two runs within one second must not overwrite the earlier, older copy.
    while os.path.exists(dest):
        dest, n = f"{full_path}.{stamp}.{n}~", n + 1
    shutil.copy2(full_path, dest)
    return dest


@dataclass
class Executor:
    """The one place actions take effect: records every action, performs it only outside check mode."""

    host_root: str
    check_mode: bool
    run_command: object  # callable(argv) -> (rc, stdout, stderr)
    backup: bool = True
    done: list[dict] = field(default_factory=list)
    backups: list[str] = field(default_factory=list)
    backed_up: set[str] = field(default_factory=set)
    stamp: str = field(default_factory=lambda: time.strftime("%Y-%m-%d@%H:%M:%S"))

    def command_argv(self, argv: list[str]) -> list[str]:
        # Under a mounted host root the host's own tools must act on the host's files.
        root = os.path.abspath(self.host_root)
        return argv if root == "/" else ["chroot", root, *argv]

    def apply(self, action: Action) -> None:
        record = action.as_dict()
        if action.argv is not None:
            record["argv"] = self.command_argv(action.argv)
        self.done.append(record)
        if self.check_mode:
            return
        full = host_path(self.host_root, action.path) if action.path else None
        if self.backup:
            for path in [action.path] if action.path else action.backs_up:
                # One copy per file and run: the state before this task started, not an intermediate one.
                if path in self.backed_up:
                    continue
                self.backed_up.add(path)
                saved = backup_file(host_path(self.host_root, path), self.stamp)
                if saved:
                    self.backups.append(saved)
        if action.kind == "write":
            atomic_write(full, action.content or "", action.mode)
        elif action.kind == "remove":
            if os.path.exists(full):
                os.unlink(full)
        elif action.kind == "command":
            rc, out, err = self.run_command(record["argv"])  # type: ignore[operator]
            if rc != 0:
                detail = (err or out or "").strip().splitlines()[-1:] or ["no output"]
                raise CmdlineError(
                    f"{' '.join(record['argv'])} failed with exit code {rc}: {detail[0]}; the files written "
                    f"before it were kept (backups: {', '.join(self.backups) or 'none'})"
                )
