# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""Reading Kubernetes API objects the way the API server and the scheduler read them.

Pure Python, standard library only. Objects are plain dicts as ``kubectl get -o json`` or
``kubernetes.core.k8s_info`` return them. What this follows:

* Quantities (``k8s.io/apimachinery/pkg/api/resource``): a decimal number with an optional binary
  (``Ki``..``Ei``), decimal (``n u m k M G T P E``) or exponent (``e3``) suffix; JSON numbers are accepted
  too. Extended resources must be whole numbers.
* A pod's effective request (``k8s.io/component-helpers/resource`` ``PodRequests``, used by the scheduler's
  fit plugin): the sum over containers, with restartable init containers (sidecars) added to it, the
  maximum with each regular init container (plus the sidecars started before it), then ``spec.overhead``
  (set by the RuntimeClass admission controller from the RuntimeClass's ``overhead.podFixed``). For
  extended resources the API server defaults a missing request to the limit.
* Pods count on a node while ``spec.nodeName`` names it and ``status.phase`` is neither ``Succeeded`` nor
  ``Failed``; a guest holds its kernel key only while its pod runs.
* Label selection: ``RuntimeClass.scheduling.nodeSelector`` is merged into the pod's node selector: every
  key must be present with exactly that value.
"""

from __future__ import annotations

import re
from fractions import Fraction

_QUANTITY_RE = re.compile(r"^([+-]?)(\d+(?:\.\d*)?|\.\d+)([A-Za-z]*|[eE][+-]?\d+)\Z")
_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
TERMINATED_PHASES = ("Succeeded", "Failed")


def parse_quantity(value) -> tuple[Fraction | None, str | None]:
    """``(exact value, None)`` or ``(None, problem)`` for a Kubernetes quantity (string or JSON number)."""
    if isinstance(value, bool):
        return None, "quantity %r is a boolean" % (value,)
    if isinstance(value, int):
        return Fraction(value), None
    if isinstance(value, float):
        return Fraction(str(value)), None
    if not isinstance(value, str):
        return None, "quantity %r is not a string or number" % (value,)
    match = _QUANTITY_RE.match(value.strip())
    if not match:
        return None, "quantity %r is not a Kubernetes quantity" % value
    sign, number, suffix = match.groups()
    amount = Fraction(number)
    if suffix in _BINARY:
        amount *= 1024 ** _BINARY[suffix]
    elif suffix in _DECIMAL:
        amount *= Fraction(10) ** _DECIMAL[suffix]
    elif suffix[:1] in ("e", "E"):
        amount *= Fraction(10) ** int(suffix[1:])
    else:
        return None, "quantity %r has an unknown suffix %r" % (value, suffix)
    return (-amount if sign == "-" else amount), None


def parse_count(value) -> tuple[int | None, str | None]:
    """A whole, non-negative quantity (extended resources and device counts), else ``(None, problem)``."""
    amount, problem = parse_quantity(value)
    if problem:
        return None, problem
    if amount.denominator != 1 or amount < 0:
        return None, "quantity %r is not a whole non-negative number (extended resources are counts)" % (value,)
    return int(amount), None


def is_extended(name: str) -> bool:
    """Extended resources have a domain (``tdx.intel.com/keys``) outside ``kubernetes.io``."""
    return "/" in name and not name.split("/", 1)[0].endswith("kubernetes.io")


def _dict(value) -> dict:
    return value if isinstance(value, dict) else {}


def _list(value) -> list:
    return value if isinstance(value, list) else []


def items(document) -> list[dict]:
    """Objects of a ``List``/``*List`` document, a list of objects, or one object."""
    if isinstance(document, list):
        return [item for item in document if isinstance(item, dict)]
    if isinstance(document, dict):
        if isinstance(document.get("items"), list):
            return [item for item in document["items"] if isinstance(item, dict)]
        if document.get("kind"):
            return [document]
    return []


def name_of(obj) -> str | None:
    name = _dict(obj.get("metadata")).get("name")
    return name if isinstance(name, str) else None


def resource_list(mapping, names, problems, where) -> dict[str, int | None]:
    """Counts of ``names`` present in a ResourceList (``status.capacity``, ``requests``, ``podFixed``)."""
    result = {}
    for name, raw in _dict(mapping).items():
        if names is not None and name not in names:
            continue
        count, problem = parse_count(raw)
        if problem:
            problems.append("%s %s: %s" % (where, name, problem))
        result[name] = count
    return result


def _container_requests(container, names, problems, where) -> dict[str, int]:
    resources = _dict(container.get("resources"))
    requests = resource_list(resources.get("requests"), names, problems, where)
    limits = resource_list(resources.get("limits"), names, problems, where)
    for name, value in limits.items():
        # The API server defaults an extended resource's request to its limit.
        if name not in requests and is_extended(name):
            requests[name] = value
    return {name: value or 0 for name, value in requests.items()}


def _add(total, extra):
    for name, value in extra.items():
        total[name] = total.get(name, 0) + value


def _max_into(total, other):
    for name, value in other.items():
        total[name] = max(total.get(name, 0), value)


def pod_requests(pod, names=None, problems=None) -> dict[str, int]:
    """The pod's effective request per resource, as the scheduler counts it (see the module docstring)."""
    problems = [] if problems is None else problems
    spec = _dict(pod.get("spec"))
    where = "pod %s/%s" % (_dict(pod.get("metadata")).get("namespace"), name_of(pod))
    total: dict[str, int] = {}
    for container in _list(spec.get("containers")):
        _add(total, _container_requests(_dict(container), names, problems, where))
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for container in _list(spec.get("initContainers")):
        container = _dict(container)
        own = _container_requests(container, names, problems, where)
        if container.get("restartPolicy") == "Always":
            _add(total, own)
            _add(sidecars, own)
            current = dict(sidecars)
        else:
            current = dict(own)
            _add(current, sidecars)
        _max_into(init_peak, current)
    _max_into(total, init_peak)
    overhead = resource_list(spec.get("overhead"), names, problems, where)
    _add(total, {name: value or 0 for name, value in overhead.items()})
    return total


def bound_pods(pods, node_name) -> list[dict]:
    """Pods the scheduler counts on ``node_name``: bound to it and not terminated."""
    found = []
    for pod in pods:
        spec, status = _dict(pod.get("spec")), _dict(pod.get("status"))
        if spec.get("nodeName") == node_name and status.get("phase") not in TERMINATED_PHASES:
            found.append(pod)
    return found


def is_running(pod) -> bool:
    return _dict(pod.get("status")).get("phase") == "Running"


def labels_of(obj) -> dict:
    return {k: v for k, v in _dict(_dict(obj.get("metadata")).get("labels")).items() if isinstance(v, str)}


def selector_matches(selector, labels) -> bool:
    """A ``nodeSelector`` map: every key present with exactly that value (empty selects every node)."""
    return all(labels.get(key) == value for key, value in _dict(selector).items())
