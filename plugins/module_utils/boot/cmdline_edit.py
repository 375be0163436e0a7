# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""Kernel-argument arithmetic: whether a command line meets a request, and the smallest edit that makes it.

Arguments are split and compared by :mod:`host.cmdline` (the kernel's own tokenizer and ``parameq``). Pure: the
boot setups (:mod:`boot.setups`) apply these edits to the files and tools they own.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from ansible_collections.confidential.tee.plugins.module_utils.host.cmdline import (
    Arg,
    kernel_args,
    parse_arg_text,
    tokenize,
)


def conflicts(arg: Arg, present: list[Arg], absent: list[Arg]) -> bool:
    """Whether an existing argument must go: it is asked absent, or it sets a present name differently."""
    if any(arg.key == spec.key and spec.value in (None, arg.value) for spec in absent):
        return True
    return any(arg.key == spec.key and not arg.same_setting(spec) for spec in present)


def satisfied(raws: list[str], present: list[Arg], absent: list[Arg]) -> bool:
    args = kernel_args([parse_arg_text(raw) for raw in raws])
    for spec in present:
        matches = [arg for arg in args if arg.key == spec.key]
        if not matches or not all(arg.same_setting(spec) for arg in matches):
            return False
    return not any(conflicts(arg, [], absent) for arg in args)


def unmet(before: list[str], after: list[str], present: list[Arg], absent: list[Arg]) -> list[str]:
    """Why ``after`` is not a correct result: the request unmet, or an unrelated argument lost."""
    problems = []
    after_args = kernel_args([parse_arg_text(raw) for raw in after])
    for spec in present:
        matches = [arg for arg in after_args if arg.key == spec.key]
        if not matches or not all(arg.same_setting(spec) for arg in matches):
            found = " ".join(arg.raw for arg in matches) or "none"
            problems.append(f"{spec.raw} is not the only setting of {spec.name} (found: {found})")
    for spec in absent:
        left = [arg.raw for arg in after_args if conflicts(arg, [], [spec])]
        if left:
            problems.append(f"{' '.join(left)} still present although {spec.raw} was asked absent")
    kept = Counter(raw for raw in before if not conflicts(parse_arg_text(raw), present, absent))
    lost = kept - Counter(after)
    if lost:
        problems.append(f"unrelated arguments would be lost: {' '.join(sorted(lost))}")
    return problems


@dataclass
class EditPlan:
    deletes: set[int] = field(default_factory=set)
    replaces: dict[int, str] = field(default_factory=dict)
    inserts: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.deletes or self.replaces or self.inserts)


def plan_edits(tokens: list[Arg], present: list[Arg], absent: list[Arg]) -> EditPlan:
    """Decide per token what to do; ``present`` makes a name single-valued with the requested value."""
    edit = EditPlan()
    kernel = kernel_args(tokens)
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


def apply_to_list(tokens: list[Arg], edit: EditPlan) -> list[str]:
    kernel_len = len(kernel_args(tokens))
    out = [edit.replaces.get(i, t.raw) for i, t in enumerate(tokens[:kernel_len]) if i not in edit.deletes]
    return out + edit.inserts + [t.raw for t in tokens[kernel_len:]]


def apply_to_text(text: str, tokens: list[Arg], edit: EditPlan) -> str:
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
        kernel = kernel_args(tokens)
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


def edit_cmdline(text: str, present: list[Arg], absent: list[Arg]) -> str:
    tokens = tokenize(text)
    return apply_to_text(text, tokens, plan_edits(tokens, present, absent))
