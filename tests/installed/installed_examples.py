"""The examples the collection shows its users, taken from where users read them (never copied into the tests):
fenced blocks of README.md and docs/*.md, each module's EXAMPLES, and the ``ansible``/``ansible-playbook`` commands
of the documents' shell blocks.

Markers, agreed with the docs: an HTML comment line right before a fence, ``<!-- example: needs-hardware: <reason>
-->`` or ``<!-- example: skip: <reason> -->``, keeps the block out of the run with that reason; in a module's
EXAMPLES the same words in a YAML comment line (``# example: needs-hardware: <reason>``) right before a task keep
that task out. Every other YAML block that is a playbook or a task list runs.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

MARKER = re.compile(r"^\s*(?:<!--|#)\s*example:\s*(needs-hardware|skip):\s*(.+?)\s*(?:-->)?\s*$")
FENCE = re.compile(r"^(\s*)```\s*([\w+-]*)\s*$")


@dataclass
class Example:
    source: str  # file:line, for the failure message
    text: str
    kind: str  # playbook or tasks
    skipped: str | None = None  # the reason, when marked
    skipped_tasks: list[str] = field(default_factory=list)


def fenced_blocks(path: Path) -> list[tuple[int, str, str, str | None]]:
    """``(line, language, text, marker reason)`` of every fenced block of a Markdown file."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks, index = [], 0
    while index < len(lines):
        opened = FENCE.match(lines[index])
        if not opened:
            index += 1
            continue
        start, body = index, []
        index += 1
        while index < len(lines) and not re.match(r"^\s*```\s*$", lines[index]):
            body.append(lines[index][len(opened.group(1)) :])
            index += 1
        before = next((line for line in reversed(lines[:start]) if line.strip()), "")
        marked = MARKER.match(before)
        reason = f"{marked.group(1)}: {marked.group(2)}" if marked else None
        blocks.append((start + 1, opened.group(2).lower(), "\n".join(body) + "\n", reason))
        index += 1
    return blocks


def kind_of(data: object) -> str | None:
    """``playbook`` (a list of plays), ``tasks`` (a list of tasks), or ``None`` (vars, inventories, other YAML)."""
    if not isinstance(data, list) or not data or not all(isinstance(item, dict) for item in data):
        return None
    if all("hosts" in item or "ansible.builtin.import_playbook" in item for item in data):
        return "playbook"
    if all(any("." in key or key in ("block", "name") for key in item) for item in data):
        return "tasks"
    return None


def markdown_examples(paths: list[Path], root: Path) -> list[Example]:
    found = []
    for path in paths:
        for line, language, text, reason in fenced_blocks(path):
            if language not in ("yaml", "yml"):
                continue
            kind = kind_of(yaml.safe_load(text))
            if kind:
                found.append(Example(f"{path.relative_to(root)}:{line}", text, kind, skipped=reason))
    return found


def named_yaml_blocks(path: Path) -> dict[str, str]:
    """YAML blocks whose first line is a comment naming a file (``# attestation.yml``): what the commands read."""
    named = {}
    for _line, language, text, _reason in fenced_blocks(path):
        first = text.splitlines()[0] if text.strip() else ""
        match = re.match(r"^#\s*([\w.-]+\.ya?ml)\b", first)
        if language in ("yaml", "yml") and match:
            named[match.group(1)] = text
    return named


def module_examples(module_dir: Path, root: Path) -> list[Example]:
    """Each module's EXAMPLES as one task list, with the tasks its markers keep out removed (and named)."""
    found = []
    for path in sorted(module_dir.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        text = next(
            (
                node.value.value
                for node in tree.body
                if isinstance(node, ast.Assign)
                and getattr(node.targets[0], "id", "") == "EXAMPLES"
                and isinstance(node.value, ast.Constant)
            ),
            None,
        )
        if not text or not text.strip():
            continue
        kept, skipped, pending = [], [], None
        for chunk in re.split(r"\n(?=- name:|# example:)", "\n" + text.strip("\n")):
            marker = MARKER.match(chunk.splitlines()[0]) if chunk.strip() else None
            if marker:
                pending = f"{marker.group(1)}: {marker.group(2)}"
                chunk = "\n".join(chunk.splitlines()[1:])
            if not chunk.strip():
                continue
            if pending:
                skipped.append(f"{chunk.strip().splitlines()[0]} ({pending})")
                pending = None
            else:
                kept.append(chunk.strip("\n"))
        source = str(path.relative_to(root))
        whole = "; ".join(skipped) if not kept else None  # every task marked: the example is marked
        found.append(Example(source, "\n".join(kept) + "\n", "tasks", skipped=whole, skipped_tasks=skipped))
    return found


def shell_commands(path: Path, programs: tuple[str, ...] = ("ansible-playbook", "ansible")) -> list[str]:
    """The commands of the ``sh`` blocks that start with one of ``programs``, continuation lines joined and
    trailing comments dropped."""
    commands = []
    for _line, language, text, reason in fenced_blocks(path):
        if language not in ("sh", "bash", "shell", "console") or reason:
            continue
        joined = re.sub(r"\\\n\s*", " ", text)
        for line in joined.splitlines():
            line = re.sub(r"\s+#\s.*$", "", line).strip()
            if line.split(" ", 1)[0] in programs:
                commands.append(line)
    return commands
