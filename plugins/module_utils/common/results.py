# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""The one result vocabulary of the modules: what changed, a check, and the name of a problem list.

* **What changed** is one value, ``changes`` (:func:`change_summary`): ``written`` and ``removed`` (the files, by
  their path on the host, or the Kubernetes objects, by ``Kind/namespace/name``, that were, or in check mode would
  be, created or changed, and removed), ``hidden`` (how many secret files were written whose names are not
  returned), ``commands`` (what was run, or would be, by description), ``backups`` (backup copies made, full
  paths) and ``entries`` (every file or object considered: ``name``, ``changed``, ``reasons``). A module that writes
  through the one change recorder (``common/changes.py``) builds it with :func:`recorded_changes`, which only reads
  the recorder's plan and never changes it.
* **A check** is one record (:func:`check_record`): ``name``, ``status`` (``PASS``, ``FAIL`` or ``SKIP``), ``ok``
  (``status`` is not ``FAIL``), ``message`` and ``fix`` (how to repair it; ``None`` when there is nothing to do),
  plus what the module adds of its own.
* **Problems** (files or objects that could not be read or used as given) are always returned under the key
  :data:`PROBLEMS`.

Old keys a release still returns beside these are listed per module in ``docs/modules.md`` (result vocabulary).

Standard library only.
"""

from __future__ import annotations

from ansible_collections.confidential.tee.plugins.module_utils.common.changes import CommandChange

PROBLEMS = "problems"
PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"
STATUSES = (PASS, FAIL, SKIP)


def change_summary(entries, *, removed=(), hidden=0, commands=(), backups=()) -> dict:
    """The ``changes`` value from ``entries`` (``{"name", "changed", "reasons"}`` each, in the order considered).

    ``removed`` names the changed entries that were (or would be) removed; every other changed entry was written.
    """
    entries = [dict(entry, reasons=list(entry["reasons"])) for entry in entries]
    removed = set(removed)
    changed = [entry["name"] for entry in entries if entry["changed"]]
    return {
        "written": [name for name in changed if name not in removed],
        "removed": [name for name in changed if name in removed],
        "hidden": hidden,
        "commands": list(commands),
        "backups": [path for path in backups if path],
        "entries": entries,
    }


def recorded_changes(changes, *, hide_secret_names=False, name=None) -> dict:
    """The ``changes`` value of what the change recorder ``changes`` planned (in check mode) or did, redacted.

    ``hide_secret_names``: secret files written are only counted (``hidden``), as the Secrets of a GitOps directory,
    whose file names say what they hold (a removal is named: it was a file this collection wrote). ``name(path)``
    shows a planned path (default: the path on the host, with ``host_root``).
    """
    shown = name or changes.display
    entries, removed, hidden = [], [], 0
    for change in changes.files:
        if hide_secret_names and change.secret and change.after is not None:
            hidden += int(change.changed)
            continue
        entries.append({"name": shown(change.path), "changed": change.changed, "reasons": change.reasons})
        if change.after is None:
            removed.append(shown(change.path))
    commands = [entry.description for entry in changes.entries if isinstance(entry, CommandChange)]
    summary = change_summary(entries, removed=removed, hidden=hidden, commands=commands, backups=changes.backups)
    return changes.redact(summary)


def file_changes_result(changes) -> dict:
    """``changes`` and the ``files`` and ``backups`` it replaces (deprecated, returned until release 0.3.0)."""
    return {"changes": recorded_changes(changes), "files": changes.records(), "backups": changes.backups}


def check_record(name: str, status: str, message: str, fix: str | None = None, **extra) -> dict:
    """One check; ``extra`` are the module's own fields (never one of the record's five)."""
    if status not in STATUSES:
        raise ValueError("check %s: status %r is not one of %s" % (name, status, ", ".join(STATUSES)))
    record = {"name": name, "status": status, "ok": status != FAIL, "message": message, "fix": fix}
    clash = sorted(set(extra) & set(record))
    if clash:
        raise ValueError("check %s: %s belong to the check record itself" % (name, ", ".join(clash)))
    record.update(extra)
    return record
