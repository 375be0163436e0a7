#!/usr/bin/env python3
"""Where does one ``tee_host_info preflight: true`` call spend its time? Prints figures; asserts nothing.

The per-host play of the fleet report is one ``tee_host_info`` call per host. Both ways Ansible runs it compile
the module's imports from source on every host:

* vanilla (AnsiballZ): a new Python process per task imports ``ansible.module_utils.basic`` and the collection's
  module_utils from the payload zip (``zipimport`` compiles ``.py`` members, it never caches bytecode);
* mitogen (``mitogen_linear``): one persistent interpreter per host receives the sources from the controller and
  compiles them at the first task (``ansible_mitogen/runner.py``, ``ModuleUtilsImporter.exec_module``; collection
  module_utils come through mitogen's own importer). Its controller side lists every installed collection once
  per task and host for a collection module (``ansible_mitogen/planner.py``, ``_load_collections``).

This script measures, on a simulated fleet (one node of each kind ``teesim fleet build`` makes):

1. the CPU cost of the imports compiled from source (fresh interpreters, no bytecode cache), against importing
   ``ansible.module_utils.basic`` alone, and the heaviest modules by ``-X importtime``;
2. the CPU cost of one warm ``main()`` per node kind, the result's size in bytes (full and ``result: fleet``),
   processes started and files read more than once, and a cProfile of one call;
3. the controller's ``list_collection_dirs()`` as mitogen calls it per task, with the collection paths of this
   environment and with ``collections_scan_sys_path = False``.
4. with ``--instructions``, the instructions (valgrind callgrind) of one fresh interpreter importing the module from
   a zip and running ``main()`` with the fleet play's arguments on each node: the figure the machine's load does not
   move, to compare two versions of the collection measured at different times.
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import io
import json
import os
import pstats
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
COLLECTIONS = REPO / ".build" / "collections"
sys.path[:0] = [str(REPO / "simulator"), str(COLLECTIONS)]

from teesim.fixtures.fleet import build_fleet  # noqa: E402

MODULE = "ansible_collections.confidential.tee.plugins.modules.tee_host_info"
PREFIX = "ansible_collections.confidential.tee."


def _child_cpu(command: list[str], env: dict[str, str], repeat: int) -> float:
    """Median CPU seconds (user + sys) of ``command`` run ``repeat`` times."""
    samples = []
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        samples.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(samples)


def _collection_zip(path: Path) -> None:
    """The collection's Python sources in a zip, as AnsiballZ ships them (``zipimport`` compiles each from source)."""
    import zipfile

    with zipfile.ZipFile(path, "w") as archive:
        for package in (
            "ansible_collections",
            "ansible_collections/confidential",
            "ansible_collections/confidential/tee",
        ):
            archive.writestr(package + "/__init__.py", "")
        for source in sorted((REPO / "plugins").rglob("*.py")):
            archive.write(source, "ansible_collections/confidential/tee/" + str(source.relative_to(REPO)))
        sources = (REPO / "plugins").rglob("*.py")
        for folder in sorted({parent for p in sources for parent in p.parents if REPO in parent.parents}):
            name = f"ansible_collections/confidential/tee/{folder.relative_to(REPO)}/__init__.py"
            if name not in archive.namelist():
                archive.writestr(name, "")


def import_costs(repeat: int, tmp: Path) -> None:
    """Our imports compiled from a zip, against ``ansible.module_utils.basic`` alone (from its bytecode cache)."""
    archive = tmp / "collection.zip"
    _collection_zip(archive)
    env = dict(os.environ, PYTHONPATH=str(archive))
    base = [sys.executable, "-c", "import ansible.module_utils.basic"]
    full = [sys.executable, "-c", f"import ansible.module_utils.basic, {MODULE}"]
    base_cpu, full_cpu = _child_cpu(base, env, repeat), _child_cpu(full, env, repeat)
    traced = subprocess.run(
        [sys.executable, "-X", "importtime", *full[1:]], env=env, capture_output=True, text=True, check=True
    ).stderr
    ours = []
    for line in traced.splitlines():
        parts = line.removeprefix("import time:").split("|")
        if len(parts) == 3 and parts[2].strip().startswith(PREFIX):
            ours.append((int(parts[0]), parts[2].strip().removeprefix(PREFIX)))
    print(f"imports compiled from a zip as AnsiballZ and mitogen do (median of {repeat} fresh interpreters):")
    print(f"  ansible.module_utils.basic alone (bytecode cache) {base_cpu * 1000:6.1f} ms CPU")
    print(f"  + tee_host_info and its module_utils from source {(full_cpu - base_cpu) * 1000:6.1f} ms CPU more")
    print(f"  {len(ours)} collection modules, import self time {sum(t for t, _ in ours) / 1000:.1f} ms; heaviest:")
    for micros, name in sorted(ours, reverse=True)[:6]:
        print(f"    {micros / 1000:5.1f} ms  {name}")


def ansiballz_costs(nodes: Path, repeat: int, tmp: Path) -> None:
    """Vanilla's host side, exactly: the AnsiballZ payloads Ansible wrote, run again (ANSIBLE_KEEP_REMOTE_FILES)."""
    remote = tmp / "remote"
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS),
        ANSIBLE_KEEP_REMOTE_FILES="1",
        ANSIBLE_REMOTE_TMP=str(remote),
    )
    node = sorted(nodes.iterdir())[0]
    ansible = str(Path(sys.executable).parent / "ansible")
    base = [ansible, "localhost", "-c", "local", "-e", f"ansible_python_interpreter={sys.executable}"]
    args = json.dumps({"host_root": str(node), "preflight": True, "gather_gpu": False})
    for module, module_args in (("ansible.builtin.ping", []), ("confidential.tee.tee_host_info", ["-a", args])):
        subprocess.run([*base, "-m", module, *module_args], env=env, check=True, capture_output=True)
    payloads = {path.name: path for path in remote.rglob("AnsiballZ_*.py")}
    cpu = {name: _child_cpu([sys.executable, str(path)], dict(os.environ), repeat) for name, path in payloads.items()}
    ping, ours = cpu.get("AnsiballZ_ping.py"), cpu.get("AnsiballZ_tee_host_info.py")
    print(f"vanilla host side, the AnsiballZ payloads run again (median of {repeat}):")
    print(f"  ping {ping * 1000:6.1f} ms CPU, tee_host_info {ours * 1000:6.1f} ms CPU ({(ours - ping) * 1000:+.1f} ms)")


class _Counter:
    """Counts opens, stats and process starts by path while a call runs."""

    def __init__(self) -> None:
        self.opens: collections.Counter[str] = collections.Counter()
        self.processes: list[str] = []
        self._saved: list[tuple[object, str, object]] = []

    def _wrap(self, owner, name, record) -> None:
        original = getattr(owner, name)

        def wrapper(*args, **kwargs):
            record(args)
            return original(*args, **kwargs)

        self._saved.append((owner, name, original))
        setattr(owner, name, wrapper)

    def __enter__(self):
        self._wrap(os, "open", lambda a: self.opens.update([str(a[0])]))
        self._wrap(subprocess, "Popen", lambda a: self.processes.append(str(a[0])))
        self._wrap(os, "posix_spawn", lambda a: self.processes.append(str(a[0])))
        self._wrap(os, "fork", lambda a: self.processes.append("fork"))
        return self

    def __exit__(self, *exc) -> None:
        for owner, name, original in reversed(self._saved):
            setattr(owner, name, original)


def _run_main(module, args: dict) -> dict:
    from ansible.module_utils import basic
    from ansible.module_utils.testing import patch_module_args

    captured: dict = {}

    def leave(self, **kwargs):
        captured.update(kwargs)
        raise SystemExit(0)

    saved = basic.AnsibleModule.exit_json, basic.AnsibleModule.fail_json
    basic.AnsibleModule.exit_json = leave
    basic.AnsibleModule.fail_json = lambda self, msg, **kw: leave(self, msg=msg, failed=True, **kw)
    try:
        with patch_module_args(args), io.StringIO() as sink:
            stdout, sys.stdout = sys.stdout, sink
            try:
                module.main()
            except SystemExit:
                pass
            finally:
                sys.stdout = stdout
    finally:
        basic.AnsibleModule.exit_json, basic.AnsibleModule.fail_json = saved
    return captured


def call_costs(nodes: Path, repeat: int) -> None:
    import importlib

    module = importlib.import_module(MODULE)
    print(f"one warm main() per node kind (median of {repeat}), preflight: true, gather_gpu: false:")
    has_result_option = "result:" in (module.DOCUMENTATION or "")
    for node in sorted(nodes.iterdir()):
        args = {"host_root": str(node), "preflight": True, "gather_gpu": False}
        samples = []
        for _ in range(repeat):
            start = time.process_time()
            result = _run_main(module, args)
            samples.append(time.process_time() - start)
        with _Counter() as counter:
            _run_main(module, args)
        repeated = {path: n for path, n in counter.opens.items() if n > 1}
        size = len(json.dumps(result))
        compact = len(json.dumps(_run_main(module, dict(args, result="fleet")))) if has_result_option else None
        print(
            f"  {node.name:<11} {statistics.median(samples) * 1000:5.1f} ms CPU, result {size:,} bytes"
            + (f" ({compact:,} with result: fleet)" if compact else "")
            + f", {sum(counter.opens.values())} opens, {len(repeated)} paths opened more than once"
            + f"{': ' + ', '.join(sorted(repeated)) if repeated else ''}, {len(counter.processes)} processes"
        )
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(repeat):
        _run_main(module, {"host_root": str(sorted(nodes.iterdir())[0]), "preflight": True, "gather_gpu": False})
    profile.disable()
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(8)
    print(f"  cProfile of {repeat} calls, by own time:")
    for line in out.getvalue().splitlines():
        if "/" in line or "{" in line:
            print("   ", line.replace(str(COLLECTIONS) + "/", "")[:150])


def collection_listing(repeat: int) -> None:
    script = (
        "import time\n"
        "from ansible import constants as C\n"
        "from ansible.plugins.loader import init_plugin_loader\n"
        "init_plugin_loader(C.COLLECTIONS_PATHS)\n"
        "from ansible.collections.list import list_collection_dirs\n"
        "start = time.process_time(); n = len(list(list_collection_dirs()))\n"
        "print(n, time.process_time() - start)\n"
    )
    print("controller, per task and host under mitogen: list_collection_dirs() in a fresh worker")
    for label, extra in (
        ("this environment", {}),
        ("collections_scan_sys_path = False", {"ANSIBLE_COLLECTIONS_SCAN_SYS_PATH": "False"}),
    ):
        env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS), **extra)
        samples, count = [], 0
        for _ in range(repeat):
            out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
            count, seconds = out.stdout.split()
            samples.append(float(seconds))
        print(f"  {label:<36} {int(count):3d} collections, {statistics.median(samples) * 1000:6.1f} ms CPU")


_FLEET_CALL = """
import json, sys
import ansible.module_utils.basic
from ansible.module_utils.testing import patch_module_args
from ansible_collections.confidential.tee.plugins.modules import tee_host_info
try:
    with patch_module_args(json.loads(sys.argv[1])):
        tee_host_info.main()
except SystemExit:
    pass
"""


def instruction_counts(nodes: Path, tmp: Path) -> None:
    """Instructions (valgrind callgrind's Ir) of one fresh interpreter, as on a host: a figure the machine's load
    does not move, for comparing two versions of the collection run at different times."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        print("instructions: valgrind not installed, left out")
        return
    archive = tmp / "collection-ir.zip"
    _collection_zip(archive)
    # Bytecode caches of ansible-core as installed (a managed host has them too); ours only from the zip.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(archive)
    base = [valgrind, "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, "-c"]

    def count(code: str, *argv: str) -> int:
        done = subprocess.run([*base, code, *argv], env=env, capture_output=True, text=True, check=True)
        return int(done.stderr.split("Collected : ")[1].split()[0])

    floor = count("import ansible.module_utils.basic")
    print("instructions of one fresh interpreter (valgrind callgrind), the fleet play's arguments:")
    print(f"  ansible.module_utils.basic alone {floor / 1e6:7.1f} M")
    for node in sorted(nodes.iterdir()):
        args = {"host_root": str(node), "preflight": True, "result": "fleet", "gather_gpu": False}
        ours = count(_FLEET_CALL, json.dumps(args))
        print(f"  {node.name:<12} import + main() {ours / 1e6:7.1f} M ({(ours - floor) / 1e6:+.1f} M)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--instructions", action="store_true", help="also count instructions with valgrind (slow, load-proof)"
    )
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} CPUs, Python {sys.version.split()[0]}")
    with tempfile.TemporaryDirectory(prefix="tee-profile-") as tmp:
        build_fleet(Path(tmp), captures=None, copies=1)
        import_costs(args.repeat, Path(tmp))
        ansiballz_costs(Path(tmp) / "nodes", args.repeat, Path(tmp))
        call_costs(Path(tmp) / "nodes", args.repeat)
        if args.instructions:
            instruction_counts(Path(tmp) / "nodes", Path(tmp))
    collection_listing(args.repeat)
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
