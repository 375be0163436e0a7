# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""Reading Kubernetes API objects the way the API server and the scheduler read them.

Pure Python, standard library only. Objects are plain dicts as ``kubectl get -o json`` or
``kubernetes.core.k8s_info`` return them. What this follows:

* Quantities: :mod:`quantity` (apimachinery's ``ParseQuantity``). Extended resources must be whole numbers;
  a value that is not one is a problem naming the object and field, and counts as unknown (``None``).
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

from ansible_collections.confidential.tee.plugins.module_utils.fleet.quantity import parse_count

TERMINATED_PHASES = ("Succeeded", "Failed")


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


def _identity(obj) -> str:
    """How a problem tells two objects of one name apart: their uid, else their resourceVersion."""
    metadata = _dict(obj.get("metadata"))
    for field in ("uid", "resourceVersion"):
        if isinstance(metadata.get(field), str) and metadata[field]:
            return "%s %s" % (field, metadata[field])
    return "no uid"


def unique_objects(objects, kind, problems, namespaced=False) -> list[dict]:
    """``objects`` with a name, each ``[namespace/]name`` once, in their order.

    The API server never lists two objects of one name (nor one without a name); a merged or edited dump can, and
    counting both would double what they request or advertise. The first is used and the input problem said,
    naming the copies (identical, or different objects by uid) and how to get a clean dump."""
    first: dict[str, dict] = {}
    copies: dict[str, list[dict]] = {}
    for obj in objects:
        name = name_of(obj)
        if name is None:
            problems.append("%s without a metadata.name (a string): left out" % kind)
            continue
        namespace = _dict(obj.get("metadata")).get("namespace")
        key = "%s/%s" % (namespace, name) if namespaced and isinstance(namespace, str) and namespace else name
        if key in first:
            copies.setdefault(key, [first[key]]).append(obj)
        else:
            first[key] = obj
    for key, same in copies.items():
        different = any(obj != same[0] for obj in same[1:])
        shape = "different objects: " + ", ".join(_identity(obj) for obj in same) if different else "identical copies"
        problems.append(
            "%s %s appears %d times in the objects (%s): the report counts it once, from the first; the API server "
            "never lists two objects of one name, so the dump was merged or edited: write it again with "
            "`kubectl get %s -A -o json`"
            % (
                kind,
                key,
                len(same),
                shape,
                kind.lower() + "s",
            )
        )
    return list(first.values())


def name_of(obj) -> str | None:
    name = _dict(obj.get("metadata")).get("name")
    return name if isinstance(name, str) else None


def object_ref(obj, kind=None) -> str:
    """``Kind namespace/name`` (or ``Kind name``), how a problem names the object it is about."""
    metadata = _dict(obj.get("metadata"))
    namespace = metadata.get("namespace")
    name = name_of(obj)
    return "%s %s%s" % (
        kind or obj.get("kind") or "object",
        "%s/" % namespace if isinstance(namespace, str) and namespace else "",
        name if name is not None else "(no name)",
    )


def resource_list(mapping, names, problems, where) -> dict[str, int | None]:
    """Counts in a ResourceList (``status.capacity``, ``requests``, ``podFixed``): ``names``, or every extended
    resource when ``names`` is ``None``. ``where`` is the object and field path; a value that is not a count is
    ``None`` and a problem ``<where>[<name>]: <why>``."""
    result = {}
    for name, raw in _dict(mapping).items():
        if (name not in names) if names is not None else not is_extended(name):
            continue
        count, problem = parse_count(raw)
        if problem:
            problems.append("%s[%s]: %s" % (where, name, problem))
        result[name] = count
    return result


def _plus(a, b):
    """A sum that stays unknown (``None``) when either side is."""
    return None if a is None or b is None else a + b


def _container_requests(container, names, problems, where) -> dict[str, int | None]:
    resources = _dict(container.get("resources"))
    requests = resource_list(resources.get("requests"), names, problems, where + ".resources.requests")
    limits = resource_list(resources.get("limits"), names, problems, where + ".resources.limits")
    for name, value in limits.items():
        # The API server defaults an extended resource's request to its limit.
        if name not in requests and is_extended(name):
            requests[name] = value
    return requests


def _add(total, extra):
    for name, value in extra.items():
        total[name] = _plus(total.get(name, 0), value)


def _max_into(total, other):
    for name, value in other.items():
        current = total.get(name, 0)
        total[name] = None if current is None or value is None else max(current, value)


def pod_requests(pod, names=None, problems=None) -> dict[str, int | None]:
    """The pod's effective request per resource, as the scheduler counts it (see the module docstring);
    ``None`` where a quantity it depends on cannot be read (a problem says which)."""
    problems = [] if problems is None else problems
    spec = _dict(pod.get("spec"))
    where = object_ref(pod, "Pod") + " spec."
    total: dict[str, int | None] = {}
    for index, container in enumerate(_list(spec.get("containers"))):
        _add(total, _container_requests(_dict(container), names, problems, where + "containers[%d]" % index))
    sidecars: dict[str, int | None] = {}
    init_peak: dict[str, int | None] = {}
    for index, container in enumerate(_list(spec.get("initContainers"))):
        container = _dict(container)
        own = _container_requests(container, names, problems, where + "initContainers[%d]" % index)
        if container.get("restartPolicy") == "Always":
            _add(total, own)
            _add(sidecars, own)
            current = dict(sidecars)
        else:
            current = dict(own)
            _add(current, sidecars)
        _max_into(init_peak, current)
    _max_into(total, init_peak)
    _add(total, resource_list(spec.get("overhead"), names, problems, where + "overhead"))
    return total


def pods_by_node(pods) -> dict[str, list[dict]]:
    """:func:`bound_pods` of every node at once, in one pass over the pods: the report asks for each node's pods,
    and one scan of every pod per node would make its controller part grow with the square of the fleet."""
    by_node: dict[str, list[dict]] = {}
    for pod in pods:
        spec, status = _dict(pod.get("spec")), _dict(pod.get("status"))
        name = spec.get("nodeName")
        # A nodeName that is not a string names no node (and could not be a key).
        if isinstance(name, str) and status.get("phase") not in TERMINATED_PHASES:
            by_node.setdefault(name, []).append(pod)
    return by_node


def bound_pods(pods, node_name) -> list[dict]:
    """Pods the scheduler counts on ``node_name``: bound to it and not terminated."""
    return pods_by_node(pods).get(node_name, [])


def is_running(pod) -> bool:
    return _dict(pod.get("status")).get("phase") == "Running"


def labels_of(obj) -> dict:
    return {k: v for k, v in _dict(_dict(obj.get("metadata")).get("labels")).items() if isinstance(v, str)}


def selector_matches(selector, labels) -> bool:
    """A ``nodeSelector`` map: every key present with exactly that value (empty selects every node)."""
    return all(labels.get(key) == value for key, value in _dict(selector).items())
