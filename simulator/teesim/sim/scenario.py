"""Scenario files: YAML describing nodes, workloads and faults, turned into a :class:`World`.

Format (every key except ``nodes`` and ``workloads`` optional)::

    name: tdx-external-vms
    description: Kata + KubeVirt + external VMs taking keys
    seed: 7
    duration: 1800            # seconds of virtual time
    settings: {nfd_sleep_interval: 60, poll_interval: 1, reserved: {tdx: 4},
               kubelet_restart_downtime: 10, plugin_restart_delay: 10, reregister_delay: 1,
               node_status_interval: 10, external_reserve: {tdx: 2}, kata_nodes: [node-a-2],
               plugin_list_latency: 0, plugin_tracks_allocate: true, min_list_interval: 0.1,
               pod_resources_background_qps: 0, kubevirt_tdx_reregisters: false}
    nodes:
      - {name: node-a, vendor: intel, profile: current, capacity: {tdx: 15}, count: 2}
    workloads:
      - {consumer: kata, resource: tdx, rate: 0.01, duration: [300, 900], launch_delay: [2, 6]}
      - {consumer: external, resource: tdx, node: node-a-1, at: 300, count: 4, duration: 1200}
      - {consumer: kubevirt, resource: sev_es, guest: sev-es, rate: 0.001}   # guest: tdx, sev, sev-es, snp
    faults:
      - {kind: kubelet-restart, node: node-a-1, at: 900}
      - {kind: sysfs-unreadable, node: node-a-1, at: 1200, duration: 120, file: misc.current}
    serve:                    # only `teesim serve` reads it (defaults shown): the resource names
      kubevirt: {tdx: devices.kubevirt.io/tdx, sev_es: devices.kubevirt.io/sev-esids}  # a VMI requests
      kata: {tdx: tdx.intel.com/keys, sev_es: sev-snp.amd.com/esids}  # Kata's RuntimeClass overhead
      nfd: true               # NFD's rule advertises Kata's names from misc.capacity

``count`` on a node makes ``name-1`` ... ``name-N``. A duration or delay is a number or ``[low, high]``.
Every error names the file and the key that is wrong.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from teesim._collection import KUBEVIRT_KEYS, MISC_RESOURCES, NFD_KEYS, SEV_ES, tee_registry
from teesim.cluster.pods import Consumer, Guest
from teesim.cluster.workload import FAULT_KINDS, FaultSpec, Range, WorkloadSpec, generate_arrivals
from teesim.kernel.node import DEFAULT_VENDOR, NodeSpec
from teesim.kernel.profiles import get_profile
from teesim.kubelet.names import extended_resource_name_problem
from teesim.sim.simulation import Settings, World


class ScenarioError(ValueError):
    """A scenario file that cannot be used, with the place and the fix."""


@dataclass(frozen=True)
class ServeSpec:
    """What ``teesim serve`` needs beyond the world: the extended resource each consumer asks for per
    misc resource (a VMI's ``compute`` container request, a Kata RuntimeClass's ``overhead.podFixed``;
    a misc resource left out means that consumer requests no key for it) and whether NFD's rule
    advertises Kata's names from ``misc.capacity`` next to the external plugins."""

    kubevirt: dict[str, str]
    kata: dict[str, str]
    nfd: bool = True


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    seed: int
    world: World
    source: str
    serve: ServeSpec | None = None


def bundled_scenarios() -> dict[str, Path]:
    """``{name: path}`` of the scenarios shipped in ``teesim/scenarios``."""
    folder = resources.files("teesim") / "scenarios"
    return {Path(str(p)).stem: Path(str(p)) for p in folder.iterdir() if str(p).endswith(".yaml")}


def resolve(name_or_path: str) -> Path:
    """A path, or the name of a bundled scenario (``quick`` or ``quick.yaml``)."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    bundled = bundled_scenarios()
    stem = path.name.removesuffix(".yaml")
    if stem in bundled and not path.exists():
        return bundled[stem]
    raise ScenarioError(
        f"{name_or_path}: no such file, and no bundled scenario of that name ({', '.join(sorted(bundled))})"
    )


def _range(value: Any, where: str) -> Range:
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return Range(float(value), float(value))
    if (
        isinstance(value, list)
        and len(value) == 2
        and all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)
        and 0 <= value[0] <= value[1]
    ):
        return Range(float(value[0]), float(value[1]))
    raise ScenarioError(f"{where}: expected seconds or [low, high] with 0 <= low <= high, got {value!r}")


def _number(data: dict, key: str, where: str, default: float | None = None, minimum: float = 0.0) -> float | None:
    value = data.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < minimum:
        raise ScenarioError(f"{where}.{key}: expected a number >= {minimum:g}, got {value!r}")
    return float(value)


def _mapping(value: Any, where: str) -> dict:
    if not isinstance(value, dict):
        raise ScenarioError(f"{where}: expected a mapping, got {type(value).__name__}")
    return value


def _check_keys(data: dict, allowed: set[str], where: str) -> None:
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ScenarioError(f"{where}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}")


def _counts(value: Any, where: str) -> dict[str, int]:
    data = _mapping(value, where)
    out: dict[str, int] = {}
    for key, count in data.items():
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ScenarioError(f"{where}.{key}: expected a non-negative integer, got {count!r}")
        out[str(key)] = count
    return out


def _hiding(data: dict, at: str) -> int | None:
    value = data.get("ciphertext_hiding_asids")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 0xFFFFFFFF:
        raise ScenarioError(f"{at}.ciphertext_hiding_asids: expected an unsigned 32-bit integer, got {value!r}")
    # Ciphertext hiding splits the SEV-ES/SNP ASID range: only a TEE whose guests charge sev_es has one.
    tech = tee_registry.of_vendor(data.get("vendor"))
    if tech is None or tech.misc != SEV_ES:
        wanted = " or ".join(t.vendor for t in tee_registry.REGISTRY if t.misc == SEV_ES)
        raise ScenarioError(f"{at}.ciphertext_hiding_asids: AMD ciphertext hiding needs vendor: {wanted}")
    return value


def _nodes(raw: Any, where: str) -> list[NodeSpec]:
    if not isinstance(raw, list) or not raw:
        raise ScenarioError(f"{where}: expected a non-empty list of nodes")
    specs: list[NodeSpec] = []
    for index, item in enumerate(raw):
        at = f"{where}[{index}]"
        data = _mapping(item, at)
        _check_keys(data, {"name", "vendor", "profile", "capacity", "count", "cpus", "ciphertext_hiding_asids"}, at)
        name = str(data.get("name", f"node-{index + 1}"))
        count = int(_number(data, "count", at, 1, 1) or 1)
        try:
            profile = get_profile(str(data.get("profile", "current")))
            capacity = _counts(data["capacity"], f"{at}.capacity") if "capacity" in data else None
            for n in range(count):
                spec = NodeSpec(
                    name=name if count == 1 else f"{name}-{n + 1}",
                    profile=profile,
                    vendor=str(data.get("vendor", DEFAULT_VENDOR)),
                    capacity=capacity,
                    cpus=int(_number(data, "cpus", at, 4, 1) or 4),
                    # AMD ciphertext hiding (teesim.kernel.kvm): SNP ASIDs 1..N of the sev_es range.
                    ciphertext_hiding_asids=_hiding(data, at),
                )
                spec.resolved_capacity()
                specs.append(spec)
        except ValueError as exc:
            raise ScenarioError(f"{at}: {exc}") from None
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ScenarioError(f"{where}: node names must be unique, got {', '.join(names)}")
    return specs


def _workloads(raw: Any, where: str, node_names: set[str]) -> list[WorkloadSpec]:
    if not isinstance(raw, list):
        raise ScenarioError(f"{where}: expected a list of workloads")
    allowed = {
        "consumer",
        "resource",
        "rate",
        "start",
        "end",
        "at",
        "count",
        "spread",
        "duration",
        "launch_delay",
        "node",
        "guest",
    }
    out: list[WorkloadSpec] = []
    for index, item in enumerate(raw):
        at = f"{where}[{index}]"
        data = _mapping(item, at)
        _check_keys(data, allowed, at)
        try:
            consumer = Consumer(str(data.get("consumer")))
        except ValueError:
            raise ScenarioError(
                f"{at}.consumer: expected kata, kubevirt or external, got {data.get('consumer')!r}"
            ) from None
        if ("rate" in data) == ("count" in data):
            raise ScenarioError(f"{at}: give exactly one of rate (Poisson arrivals per second) or count (a burst)")
        node = data.get("node")
        if node is not None and str(node) not in node_names:
            raise ScenarioError(f"{at}.node: unknown node {node!r}; nodes are {', '.join(sorted(node_names))}")
        if consumer is Consumer.EXTERNAL and node is None and len(node_names) > 1:
            raise ScenarioError(f"{at}.node: external VMs run on one node; name it")
        guest = _guest(data.get("guest"), at)
        try:
            spec = _workload_spec(data, consumer, guest, node, at)
        except ScenarioError:
            raise
        except ValueError as exc:
            raise ScenarioError(f"{at}: {exc}") from None
        if spec.resource not in MISC_RESOURCES:
            raise ScenarioError(f"{at}.resource: expected tdx, sev, sev_es (or snp), got {data.get('resource')!r}")
        if consumer is Consumer.KATA and spec.guest not in (Guest.TDX, Guest.SNP):
            raise ScenarioError(f"{at}: Kata confidential guests are TDX or SNP, not {spec.guest.value}")
        out.append(spec)
    return out


def _guest(value: Any, where: str) -> Guest | None:
    if value is None:
        return None
    try:
        return Guest(str(value))
    except ValueError:
        choices = ", ".join(g.value for g in Guest)
        raise ScenarioError(f"{where}.guest: expected one of {choices}, got {value!r}") from None


def _workload_spec(data: dict, consumer: Consumer, guest: Guest | None, node: Any, at: str) -> WorkloadSpec:
    return WorkloadSpec(
        consumer=consumer,
        resource=str(data.get("resource", "tdx")),
        duration=_range(data.get("duration", 600), f"{at}.duration"),
        launch_delay=_range(data.get("launch_delay", [2, 6]), f"{at}.launch_delay"),
        rate=_number(data, "rate", at),
        start=_number(data, "start", at, 0.0) or 0.0,
        end=_number(data, "end", at),
        at=_number(data, "at", at),
        count=int(_number(data, "count", at, 0) or 0),
        spread=_number(data, "spread", at, 0.0) or 0.0,
        node=None if node is None else str(node),
        guest=guest,
    )


def _faults(raw: Any, where: str, node_names: set[str]) -> list[FaultSpec]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ScenarioError(f"{where}: expected a list of faults")
    out: list[FaultSpec] = []
    for index, item in enumerate(raw):
        at = f"{where}[{index}]"
        data = _mapping(item, at)
        _check_keys(data, {"kind", "at", "node", "duration", "file"}, at)
        kind = str(data.get("kind"))
        if kind not in FAULT_KINDS:
            raise ScenarioError(f"{at}.kind: expected one of {', '.join(FAULT_KINDS)}, got {kind!r}")
        node = str(data.get("node", ""))
        if node not in node_names:
            raise ScenarioError(f"{at}.node: unknown node {node!r}; nodes are {', '.join(sorted(node_names))}")
        filename = str(data.get("file", "misc.current"))
        if filename not in ("misc.current", "misc.capacity"):
            raise ScenarioError(f"{at}.file: expected misc.current or misc.capacity, got {filename!r}")
        out.append(
            FaultSpec(
                kind,
                _number(data, "at", at, 0.0) or 0.0,
                node,
                _number(data, "duration", at, 60.0) or 0.0,
                filename,
            )
        )
    return out


_POSITIVE_SETTINGS = frozenset(
    {
        "nfd_sleep_interval",
        "poll_interval",
        "kubelet_restart_downtime",
        "plugin_restart_delay",
        "reregister_delay",
        "node_status_interval",
        "min_list_interval",
        "virt_handler_backoff_base",
        "virt_handler_backoff_max",
        "node_cpu",
        "node_memory",
    }
)
_NON_NEGATIVE_SETTINGS = frozenset({"plugin_list_latency", "pod_resources_background_qps", "api_latency"})
_BOOL_SETTINGS = frozenset({"plugin_tracks_allocate", "kubevirt_tdx_reregisters"})
_OTHER_SETTINGS = frozenset({"reserved", "external_reserve", "kata_nodes"}) | _BOOL_SETTINGS


def _settings(raw: Any, where: str, node_names: set[str]) -> Settings:
    data = _mapping(raw or {}, where)
    _check_keys(data, _POSITIVE_SETTINGS | _NON_NEGATIVE_SETTINGS | _OTHER_SETTINGS, where)
    values: dict[str, Any] = {}
    for key in _POSITIVE_SETTINGS & set(data):
        values[key] = _number(data, key, where, minimum=0.001)
    for key in _NON_NEGATIVE_SETTINGS & set(data):
        values[key] = _number(data, key, where)
    for key in ("reserved", "external_reserve"):
        if key in data:
            values[key] = _counts(data[key], f"{where}.{key}")
    for key in _BOOL_SETTINGS & set(data):
        if not isinstance(data[key], bool):
            raise ScenarioError(f"{where}.{key}: expected true or false")
        values[key] = data[key]
    if "kata_nodes" in data:
        kata = data["kata_nodes"]
        if not isinstance(kata, list) or not all(isinstance(n, str) and n in node_names for n in kata):
            raise ScenarioError(
                f"{where}.kata_nodes: expected a list of node names from {', '.join(sorted(node_names))}, got {kata!r}"
            )
        values["kata_nodes"] = tuple(kata)
    return Settings(**values)


def _names(raw: Any, where: str, default: dict[str, str]) -> dict[str, str]:
    if raw is None:
        return dict(default)
    data = _mapping(raw, where)
    out: dict[str, str] = {}
    for misc, name in data.items():
        if misc not in MISC_RESOURCES:
            choices = ", ".join(MISC_RESOURCES)
            raise ScenarioError(f"{where}: unknown misc resource {misc!r}; expected one of {choices}")
        problem = extended_resource_name_problem(name) if isinstance(name, str) else "not a string"
        if problem is not None:
            raise ScenarioError(f"{where}.{misc}: {name!r} is not an extended resource name: {problem}")
        out[str(misc)] = name
    return out


def _serve(raw: Any, where: str) -> ServeSpec | None:
    if raw is None:
        return None
    data = _mapping(raw, where)
    _check_keys(data, {"kubevirt", "kata", "nfd"}, where)
    nfd = data.get("nfd", True)
    if not isinstance(nfd, bool):
        raise ScenarioError(f"{where}.nfd: expected true or false, got {nfd!r}")
    kata_default = {m: n for m, n in NFD_KEYS.items() if m in KUBEVIRT_KEYS}
    return ServeSpec(
        _names(data.get("kubevirt"), f"{where}.kubevirt", dict(KUBEVIRT_KEYS)),
        _names(data.get("kata"), f"{where}.kata", kata_default),
        nfd,
    )


def parse_scenario(data: Any, source: str = "<scenario>", seed: int | None = None) -> Scenario:
    """Validate a loaded YAML document; ``seed`` overrides the file's."""
    root = _mapping(data, source)
    allowed = {"name", "description", "seed", "duration", "settings", "nodes", "workloads", "faults", "serve"}
    _check_keys(root, allowed, source)
    nodes = _nodes(root.get("nodes"), f"{source}: nodes")
    names = {n.name for n in nodes}
    workloads = _workloads(root.get("workloads", []), f"{source}: workloads", names)
    faults = _faults(root.get("faults"), f"{source}: faults", names)
    duration = _number(root, "duration", source, 3600.0, 1.0) or 3600.0
    file_seed = root.get("seed", 0)
    if isinstance(file_seed, bool) or not isinstance(file_seed, int):
        raise ScenarioError(f"{source}.seed: expected an integer, got {file_seed!r}")
    used_seed = file_seed if seed is None else seed
    world = World(
        nodes=tuple(nodes),
        arrivals=tuple(generate_arrivals(workloads, used_seed, duration)),
        faults=tuple(faults),
        duration=duration,
        settings=_settings(root.get("settings"), f"{source}: settings", names),
        seed=used_seed,
    )
    return Scenario(
        str(root.get("name", Path(source).stem)),
        str(root.get("description", "")),
        used_seed,
        world,
        source,
        _serve(root.get("serve"), f"{source}: serve"),
    )


def load_scenario(name_or_path: str, seed: int | None = None) -> Scenario:
    path = resolve(name_or_path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{path}: not valid YAML: {exc}") from None
    return parse_scenario(data, str(path), seed)
