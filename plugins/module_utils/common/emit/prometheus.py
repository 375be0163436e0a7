# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""Samples in the Prometheus text exposition format (version 0.0.4, "Text format details").

Metric names match ``[a-zA-Z_:][a-zA-Z0-9_:]*`` and label names ``[a-zA-Z_][a-zA-Z0-9_]*``; anything else is
refused. In a label value ``\\``, ``"`` and a line feed are escaped as ``\\\\``, ``\\"`` and ``\\n``; every
other character (UTF-8) stands for itself, so no value can end the label set or start a new sample.

Standard library only.
"""

from __future__ import annotations

import math
import re

from ansible_collections.confidential.tee.plugins.module_utils.common.emit import refuse

_METRIC = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")


def metric_name(name: str, variable: str = "metric name") -> str:
    if not isinstance(name, str) or not _METRIC.match(name):
        raise refuse(variable, "%r is not a Prometheus metric name ([a-zA-Z_:][a-zA-Z0-9_:]*)" % (name,))
    return name


def label_name(name: str, variable: str = "label name") -> str:
    if not isinstance(name, str) or not _LABEL.match(name) or name.startswith("__"):
        raise refuse(variable, "%r is not a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*, no '__' prefix)" % (name,))
    return name


def label_value(value: object) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value, name: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise refuse(name, "must be a number, got %s" % type(value).__name__)
    if isinstance(value, float) and not math.isfinite(value):
        return {True: "+Inf", False: "-Inf"}[value > 0] if math.isinf(value) else "NaN"
    return str(value) if isinstance(value, int) else repr(value)


def sample(name: str, labels: dict, value) -> str:
    """One sample line ``name{label="value",...} value``; labels keep the order given."""
    metric_name(name)
    rendered = ",".join(
        '%s="%s"' % (label_name(key, "label of %s" % name), label_value(val)) for key, val in labels.items()
    )
    return "%s{%s} %s" % (name, rendered, _number(value, name))


def help_line(name: str, text: str) -> str:
    """``# HELP`` with ``\\`` and line feeds escaped as the format requires."""
    return "# HELP %s %s" % (metric_name(name), text.replace("\\", "\\\\").replace("\n", "\\n"))


def type_line(name: str, kind: str) -> str:
    if kind not in ("counter", "gauge", "histogram", "summary", "untyped"):
        raise refuse(name, "has metric type %r, which the format does not know" % kind)
    return "# TYPE %s %s" % (metric_name(name), kind)
