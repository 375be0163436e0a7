"""A real Kubernetes node on this machine: containerd and the kubelet of ``make node``, joined to a control plane.

``RealNode`` starts, as root, in a private directory:

* teesim's kernel for the node (``teesim node kernel``): the node's misc tree under ``<workdir>/root`` and the
  socket the guests launch through (``simulator/teesim/kernel/service.py``);
* containerd (``make node``'s, Debian's runc), with the runtime handlers of the collection's Kata
  RuntimeClasses mapped to runc, so RuntimeClass admission, its overhead and the scheduler's accounting work as
  on a real cluster while the pods run as plain containers; the CNI plugins ``ptp`` and ``host-local`` give the
  pods a network (and containerd's CRI reports ``NetworkReady``, without which the kubelet keeps the Node
  ``NotReady``); the pause and guest images are imported from ``make node``'s archives (no registry);
* the kubelet, whose client certificate the control plane's CA signs (``system:node:<name>``): it registers the
  Node itself, with its real status.

Where nothing may be left behind:

* every process runs in one cgroup tree, ``<controller>/<id>`` on each hierarchy (``<id>`` names the run), which is
  also the kubelet's ``cgroupRoot``: its pods, containerd's shims and the containers all stay inside; ``stop()``
  kills whatever is left there and removes the cgroups, deepest first;
* containerd and the kubelet run in a private mount namespace (``unshare --mount --propagation private``) with a
  tmpfs over ``/run`` and the node directory's own ``var/lib`` bound over ``/var/lib`` (the kubelet hard-codes
  ``/var/lib/kubelet/device-plugins``): every mount the runtime or the kubelet makes (rootfs overlays, volumes,
  network namespaces) lives and dies with that namespace;
* no fixed port: the kubelet's port is a free one chosen at start, its read-only and healthz ports are off,
  containerd's streaming server binds port 0 on loopback;
* the CNI plugin ``ptp`` turns on ``net.ipv4.ip_forward`` as it does on every node; ``stop()`` restores the
  value it found.

Cgroup v1: these machines mount the v1 controllers (a hybrid layout) and PID 1 is not systemd, so the kubelet
runs with ``failCgroupV1: false`` (the deprecated path of KEP-4569) and the ``cgroupfs`` driver (containerd
reports it over CRI's RuntimeConfig, which the kubelet of 1.37 follows). On a cgroup v2 host the same code makes
one cgroup under ``/sys/fs/cgroup`` with the root's controllers enabled below it (written, not yet run: these
machines have no cgroup v2 host outside the VMs).
"""

from __future__ import annotations

import datetime
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import contextlib

from kube_control_plane import REPO_ROOT, ControlPlane, free_port, write_kubeconfig

sys.path.insert(0, str(REPO_ROOT / "simulator"))
from teesim._collection import collection_module, tee

runtimeclasses = collection_module("plugins.module_utils.cluster.runtimeclasses")
pool_policy = collection_module("plugins.module_utils.common.pool_policy")

CGROUP_FS = Path("/sys/fs/cgroup")
IP_FORWARD = Path("/proc/sys/net/ipv4/ip_forward")
RUNC = "/usr/sbin/runc"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
# The sysctls the kubelet sets at start (pkg/kubelet/cm/container_manager_linux.go setupKernelTunables, v1.37.2):
# vm.overcommit_memory=1, vm.panic_on_oom=0, kernel.panic=10, kernel.panic_on_oops=1, the root key quotas.
KUBELET_TUNABLES = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
)


def node_build_dir() -> Path:
    """``make node``'s cache directory (built now if missing); ``TEE_NODE_BUILD_DIR`` names another one."""
    if os.environ.get("TEE_NODE_BUILD_DIR"):
        return Path(os.environ["TEE_NODE_BUILD_DIR"])
    built = subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "build_node.py")], capture_output=True, text=True, check=False
    )
    if built.returncode != 0:
        raise RuntimeError(f"make node failed:\n{built.stderr[-4000:]}")
    return Path(built.stdout.strip().splitlines()[-1])


def cgroup_hierarchies() -> list[Path]:
    """The directories a process's cgroup is set in: the unified root on cgroup v2, every v1 hierarchy otherwise
    (the named ``systemd`` one and the hybrid ``unified`` one too, which runc also uses)."""
    if (CGROUP_FS / "cgroup.controllers").exists():
        return [CGROUP_FS]
    return sorted(p for p in CGROUP_FS.iterdir() if p.is_dir() and not p.is_symlink() and os.path.ismount(p))


def remove_cgroup_tree(top: Path) -> list[str]:
    """rmdir ``top`` and every cgroup below it, deepest first; returns the paths that would not go."""
    left = []
    for directory in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        try:
            directory.rmdir()
        except OSError as refused:
            left.append(f"{directory}: {refused.strerror}")
    if top.is_dir():
        try:
            top.rmdir()
        except OSError as refused:
            left.append(f"{top}: {refused.strerror}")
    return left


def pids_in(top: Path) -> set[int]:
    """Every process in ``top`` and the cgroups below it."""
    found: set[int] = set()
    for procs in top.rglob("cgroup.procs"):
        try:
            found.update(int(line) for line in procs.read_text().split())
        except OSError:
            continue  # removed meanwhile
    return found


class RealNode:
    """containerd + kubelet + teesim's kernel for one Node of ``plane`` (see the module docstring)."""

    def __init__(
        self,
        plane: ControlPlane,
        name: str = "tee-node-1",
        *,
        runtime_handlers: tuple[str, ...] = (),
        vendor: str = "intel",
        capacity: dict[str, int] | None = None,
        labels: dict[str, str] | None = None,
        build_dir: Path | None = None,
    ):
        self.plane, self.name = plane, name
        self.runtime_handlers, self.vendor, self.capacity = runtime_handlers, vendor, capacity or {}
        self.labels = labels or {}
        self.build_dir = build_dir or node_build_dir()
        self.build = json.loads((self.build_dir / "build.json").read_text())
        self.workdir = Path(tempfile.mkdtemp(prefix="tee-node-"))
        self.id = self.workdir.name  # the cgroup root's name too: unique while the directory exists
        self.root = self.workdir / "root"  # the node's host tree: teesim's misc files and /var/lib
        self.processes: dict[str, subprocess.Popen] = {}
        self.cgroups = [h / self.id for h in cgroup_hierarchies()]
        self.ip_forward: str | None = None
        # A /24 of 10.128.0.0/9 drawn at random: two nodes at once rarely collide.
        self.pod_subnet = f"10.{random.randrange(128, 256)}.{random.randrange(256)}.0/24"

    # -- lifecycle --------------------------------------------------------------------------------------------
    def __enter__(self) -> RealNode:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self, timeout: float = 120) -> RealNode:
        try:
            self._make_cgroups()
            self.ip_forward = IP_FORWARD.read_text().strip()
            (self.root / "var/lib/kubelet").mkdir(parents=True)
            self._start_namespace()
            self._start_kernel(timeout)
            self._start_containerd(timeout)
            self._import_images()
            self._start_kubelet(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> list[str]:
        """End every process, remove every cgroup and file and the Node; returns what could not be removed (empty:
        all)."""
        for name in ("kubelet", "containerd"):
            self._end(name, timeout=15)
        for _ in range(50):  # shims, containers and pause processes: whatever is left in the cgroups
            pids = set().union(*(pids_in(c) for c in self.cgroups if c.is_dir()))
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)
        for name in list(self.processes):
            self._end(name, timeout=10)
        left = [entry for c in self.cgroups for entry in remove_cgroup_tree(c)]
        if self.ip_forward is not None:
            IP_FORWARD.write_text(self.ip_forward + "\n")
        shutil.rmtree(self.workdir, ignore_errors=True)
        if self.workdir.exists():
            left.append(f"{self.workdir}: not removed")
        # The Node object its kubelet registered: without a node-lifecycle controller nobody marks it NotReady, and
        # the scheduler would go on binding pods to a node that is gone.
        self.plane.kubectl("delete", "node", self.name, "--ignore-not-found", "--wait=false", check=False)
        return left

    def _end(self, name: str, timeout: float) -> None:
        process = self.processes.pop(name, None)
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    # -- pieces -----------------------------------------------------------------------------------------------
    def _make_cgroups(self) -> None:
        for cgroup in self.cgroups:
            (cgroup / "node").mkdir(parents=True)
            if cgroup.parent == CGROUP_FS:  # cgroup v2: the kubelet's pods below need the controllers enabled
                enabled = (CGROUP_FS / "cgroup.subtree_control").read_text().split()
                (cgroup / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in enabled))
            if cgroup.parent.name == "cpuset":  # a v1 cpuset cgroup starts with no CPUs and no memory nodes
                for group in (cgroup, cgroup / "node"):
                    for knob in ("cpuset.cpus", "cpuset.mems"):
                        (group / knob).write_text((group.parent / knob).read_text())

    def _spawn(
        self, name: str, command: list[str], in_namespace: bool = False, env: dict[str, str] | None = None
    ) -> subprocess.Popen:
        if in_namespace:
            command = ["nsenter", f"--mount=/proc/{self.processes['namespace'].pid}/ns/mnt", "--", *command]
        log = open(self.workdir / f"{name}.log", "ab")  # noqa: SIM115 - handed to the child
        try:
            # The child joins the node's cgroups before it runs (its children are born there).
            join = " ".join(f"echo $$ > {c / 'node' / 'cgroup.procs'};" for c in self.cgroups)
            process = subprocess.Popen(
                ["sh", "-c", f'{join} exec "$@"', "sh", *command],
                stdout=log,
                stderr=log,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=env,
            )
        finally:
            log.close()
        self.processes[name] = process
        return process

    def log_tail(self, name: str, chars: int = 3000) -> str:
        path = self.workdir / f"{name}.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else ""

    def _wait(self, name: str, ready, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.processes[name].poll() is not None:
                raise RuntimeError(f"{name} exited ({self.processes[name].returncode}):\n{self.log_tail(name)}")
            if ready():
                return
            time.sleep(0.2)
        raise RuntimeError(f"{name} not ready after {timeout:.0f} s:\n{self.log_tail(name)}")

    def _start_namespace(self) -> None:
        """A process holding the private mount namespace the runtime and the kubelet share.

        The kubelet's kernel tunables are files of this namespace, bound over ``/proc/sys``: on a shared test
        machine ``kernel.panic_on_oops=1`` would make any other process's kernel oops a reboot, and the values
        would outlive the node. The kubelet reads and writes them as on a host (``tunables()`` shows what it set).
        """
        var_lib = self.root / "var" / "lib"
        binds = []
        for tunable in KUBELET_TUNABLES:
            copy = self.workdir / "sysctl" / tunable.replace("/", ".")
            copy.parent.mkdir(exist_ok=True)
            copy.write_text(Path("/proc/sys", tunable).read_text())
            binds.append(f"mount --bind {copy} /proc/sys/{tunable}")
        script = " && ".join(
            [
                "mount -t tmpfs tmpfs /run",
                f"mount --bind {var_lib} /var/lib",
                *binds,
                "echo ready",
                "exec sleep infinity",
            ]
        )
        holder = self._spawn("namespace", ["unshare", "--mount", "--propagation", "private", "sh", "-c", script])
        self._wait("namespace", lambda: "ready" in self.log_tail("namespace"), 30)
        assert holder.pid

    def _start_kernel(self, timeout: float) -> None:
        self.kernel_socket = self.workdir / "kernel" / "kernel.sock"
        self.kernel_socket.parent.mkdir()
        capacity = [f"--capacity={r}={n}" for r, n in sorted(self.capacity.items())]
        command = [sys.executable, "-c", "import sys; from teesim.cli import main; sys.exit(main())"]
        command += ["node", "kernel", f"--root={self.root}", f"--socket={self.kernel_socket}"]
        command += [f"--vendor={self.vendor}", f"--name={self.name}", f"--cgroup-prefix=/{self.id}", *capacity]
        # This checkout's simulator, whichever venv runs the harness.
        path = os.pathsep.join(filter(None, [str(REPO_ROOT / "simulator"), os.environ.get("PYTHONPATH")]))
        self._spawn("kernel", command, env={**os.environ, "PYTHONPATH": path})
        self._wait("kernel", self.kernel_socket.exists, timeout)

    def _containerd_config(self) -> str:
        runc_options = {"BinaryName": RUNC, "SystemdCgroup": False}
        runtimes = {
            handler: {"runtime_type": "io.containerd.runc.v2", "options": runc_options}
            for handler in ("runc", *self.runtime_handlers)
        }
        return _toml(
            {
                "version": 3,
                "root": str(self.workdir / "containerd"),
                "state": "/run/containerd",  # the namespace's tmpfs
                "grpc": {"address": str(self.containerd_socket)},
                "plugins": {
                    "io.containerd.cri.v1.images": {
                        "snapshotter": "overlayfs",
                        "pinned_images": {"sandbox": self.build["images"]["pause"]},
                    },
                    "io.containerd.cri.v1.runtime": {
                        "containerd": {"default_runtime_name": "runc", "runtimes": runtimes},
                        # No hugetlb controller is mounted on these hosts: never ask runc for hugepage limits.
                        "disable_hugetlb_controller": True,
                        # Root here lacks CAP_SYS_RESOURCE (bit 24 of CapEff), so runc cannot lower a process's
                        # oom_score_adj (the pause container's -998, Guaranteed pods' -997): containerd raises such
                        # values to its own score, as it does for rootless nodes.
                        "restrict_oom_score_adj": True,
                        "cni": {"bin_dirs": [str(self.build_dir / "bin" / "cni")], "conf_dir": str(self.cni_dir)},
                    },
                    "io.containerd.grpc.v1.cri": {"stream_server_address": "127.0.0.1", "stream_server_port": "0"},
                },
            }
        )

    def _cni_config(self) -> dict:
        """ptp + host-local on the node's pod subnet."""
        return {
            "cniVersion": "1.0.0",
            "name": f"tee-node-{self.id}",
            "plugins": [
                {
                    "type": "ptp",
                    "ipMasq": False,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": self.pod_subnet}]],
                        "dataDir": str(self.workdir / "cni-ipam"),
                    },
                }
            ],
        }

    def _start_containerd(self, timeout: float) -> None:
        self.containerd_socket = self.workdir / "containerd.sock"
        self.cni_dir = self.workdir / "cni"
        self.cni_dir.mkdir()
        (self.cni_dir / "10-ptp.conflist").write_text(json.dumps(self._cni_config(), indent=2))
        config = self.workdir / "containerd.toml"
        config.write_text(self._containerd_config())
        bin_dir = self.build_dir / "bin"
        self._spawn("containerd", [str(bin_dir / "containerd"), f"--config={config}"], in_namespace=True)
        self._wait("containerd", self.containerd_socket.exists, timeout)

    def ctr(self, *args: str) -> subprocess.CompletedProcess[str]:
        command = [str(self.build_dir / "bin" / "ctr"), f"--address={self.containerd_socket}", "-n", "k8s.io", *args]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"ctr {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
        return done

    def _import_images(self) -> None:
        for name in self.build["images"]:
            self.ctr("images", "import", "--platform=linux/amd64", str(self.build_dir / "images" / f"{name}.tar"))

    def _kubelet_config(self, port: int) -> dict:
        return {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": "127.0.0.1",
            "port": port,
            "readOnlyPort": 0,
            "healthzPort": 0,
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": False},
                "x509": {"clientCAFile": str(self.plane.ca)},
            },
            "authorization": {"mode": "AlwaysAllow"},
            "containerRuntimeEndpoint": f"unix://{self.containerd_socket}",
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": f"/{self.id}",
            "failCgroupV1": False,  # the deprecated path (KEP-4569); see the module docstring
            "failSwapOn": False,
            # podLogsDir (v1.29+): the pods' logs stay in the node's directory, not the host's /var/log/pods.
            "podLogsDir": str(self.workdir / "pod-logs"),
            "registerNode": True,
            "syncFrequency": "5s",
            "fileCheckFrequency": "5s",
            "nodeStatusUpdateFrequency": "5s",
            "evictionHard": {},  # a test machine's disk and memory: never evict the test's pods
            "localStorageCapacityIsolation": False,
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "serializeImagePulls": False,
        }

    def _start_kubelet(self, timeout: float) -> None:
        cert = self.plane.pki.issue(f"kubelet-{self.id}", f"system:node:{self.name}", groups=("system:nodes",))
        kubeconfig = write_kubeconfig(self.workdir / "kubelet.kubeconfig", self.plane.server, self.plane.ca, *cert)
        (self.workdir / "pod-logs").mkdir()
        config = self.workdir / "kubelet.yaml"
        config.write_text(yaml.safe_dump(self._kubelet_config(free_port())))
        labels = ",".join(f"{k}={v}" for k, v in sorted(self.labels.items()))
        command = [str(self.build_dir / "bin" / "kubelet"), f"--config={config}", f"--kubeconfig={kubeconfig}"]
        command += [f"--hostname-override={self.name}", "--root-dir=/var/lib/kubelet", "--v=1"]
        command += [f"--node-labels={labels}"] if labels else []
        self.kubelet_command = command
        self._spawn("kubelet", command, in_namespace=True)
        self._wait("kubelet", self.ready, timeout)
        # The API server's TaintNodesByCondition admission gave the new Node the not-ready taint; on a cluster
        # kube-controller-manager's node-lifecycle controller removes it once the kubelet reports Ready
        # (pkg/controller/nodelifecycle, v1.37.2). The live control plane runs no controller-manager: this is
        # that one step, taken on the same condition.
        self.plane.kubectl("taint", "node", self.name, f"{NOT_READY_TAINT}:NoSchedule-", check=False)

    def restart_kubelet(self, timeout: float = 120) -> None:
        """Stop the kubelet (SIGTERM, as systemd does) and start it again with the same configuration; pods keep
        running in containerd meanwhile. Returns once the new kubelet has marked the Node Ready again."""
        self._end("kubelet", timeout=30)
        log = self.workdir / "kubelet.log"
        log.rename(log.with_suffix(f".{time.time_ns()}.log"))
        restarted = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
        self._spawn("kubelet", self.kubelet_command, in_namespace=True)

        def heartbeat_since_restart() -> bool:
            conditions = (self.node_object() or {}).get("status", {}).get("conditions", [])
            ready = [c for c in conditions if c["type"] == "Ready" and c["status"] == "True"]
            beat = ready and datetime.datetime.fromisoformat(ready[0]["lastHeartbeatTime"].replace("Z", "+00:00"))
            return bool(beat) and beat > restarted

        self._wait("kubelet", heartbeat_since_restart, timeout)

    def start_plugin(self, name: str, command: list[str], *, run_dirs: tuple[str, ...] = ()) -> subprocess.Popen:
        """A device plugin that hard-codes the node's paths (KubeVirt's virt-handler plugins), unchanged: under
        ``scripts/teesim-serve-ns.sh --cgroup --pid`` over this node's root, it dials this kubelet's socket and
        reads the misc files teesim's kernel writes (through ``/proc/1/root``, as virt-handler does)."""
        wrapper = [str(REPO_ROOT / "scripts" / "teesim-serve-ns.sh"), "--cgroup", "--pid"]
        wrapper += [arg for run_dir in run_dirs for arg in ("--run-dir", run_dir)]
        return self._spawn(f"plugin-{name}", [*wrapper, str(self.root), *command])

    def wait_allocatable(self, resource: str, count: int, timeout: float = 60) -> None:
        """Until the kubelet reports ``count`` of ``resource`` allocatable on its Node (a plugin registered)."""

        def reported() -> bool:
            node = self.node_object() or {}
            return node.get("status", {}).get("allocatable", {}).get(resource) == str(count)

        self._wait("kubelet", reported, timeout)

    # -- queries ----------------------------------------------------------------------------------------------
    def tunables(self) -> dict[str, str]:
        """The kernel tunables as the kubelet left them in the node's namespace (see _start_namespace)."""
        return {t: (self.workdir / "sysctl" / t.replace("/", ".")).read_text().strip() for t in KUBELET_TUNABLES}

    def node_object(self) -> dict | None:
        done = self.plane.kubectl("get", "node", self.name, "-o", "json", check=False)
        return json.loads(done.stdout) if done.returncode == 0 else None

    def ready(self) -> bool:
        node = self.node_object()
        conditions = {c["type"]: c["status"] for c in (node or {}).get("status", {}).get("conditions", [])}
        return conditions.get("Ready") == "True"


def _toml(table: dict, prefix: str = "") -> str:
    """The few TOML shapes containerd's config needs: scalars, lists of strings, nested tables."""
    lines, subtables = [], []
    for key, value in table.items():
        quoted = key if key.replace("_", "").replace("-", "").isalnum() else json.dumps(key)
        if isinstance(value, dict):
            subtables.append((f"{prefix}.{quoted}" if prefix else quoted, value))
        elif isinstance(value, bool):
            lines.append(f"{quoted} = {'true' if value else 'false'}")
        else:
            lines.append(f"{quoted} = {json.dumps(value)}")
    text = (f"[{prefix}]\n" if prefix and lines else "") + "".join(line + "\n" for line in lines)
    return text + "".join(_toml(sub, name) for name, sub in subtables)


# -- what runs on a node: the collection's Kata handlers, KubeVirt's TDX plugin, guests, VMs outside Kubernetes --
# Every Kata RuntimeClass handler the collection renders; RealNode's containerd maps each to runc.
KATA_HANDLERS = (*(runtimeclasses.class_name(t, gpu) for t in ("tdx", "snp") for gpu in (False, True)), "kata-cc")
# The labels the collection's TDX Kata RuntimeClass selects.
TDX_NODE_LABELS = {runtimeclasses.KATA_RUNTIME_LABEL: "true", runtimeclasses.TEE_LABELS["tdx"]: "true"}
# The feature gate that starts KubeVirt's TDX plugin (virt-handler's device controller).
KUBEVIRT_TDX_GATE = pool_policy.ADVERTISERS["kubevirt"].gates[tee.INTEL]
# Where a guest's container sees the directory of the node's kernel socket.
GUEST_KERNEL_DIR = "/run/teesim"
# A VM outside Kubernetes (libvirt's QEMU): a process in the node's own cgroup (not kubepods) making one launch
# through teesim's kernel socket (the protocol of simulator/teesim/kernel/service.py), printing the kernel's answer,
# and holding the key for argv[2] seconds, or until SIGTERM without it.
OUTSIDE_VM = """
import signal, socket, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
kernel = socket.socket(socket.AF_UNIX)
kernel.connect(sys.argv[1])
kernel.sendall(b"launch tdx 1\\n")
answer = kernel.makefile().readline().strip()
print(answer, flush=True)
if answer.startswith("ok "):
    if len(sys.argv) > 2:
        time.sleep(float(sys.argv[2]))
    else:
        while True:
            time.sleep(3600)
"""


def outside_vm(kernel_socket: Path, hold: float | None = None) -> list[str]:
    """The command of a VM outside Kubernetes holding one TDX key for ``hold`` seconds (None: until SIGTERM)."""
    return [sys.executable, "-c", OUTSIDE_VM, str(kernel_socket), *([] if hold is None else [f"{hold:.3f}"])]


def kubevirt_plugins() -> Path:
    """KubeVirt v1.9.0's device plugins as ``make upstream`` builds them (built now if missing)."""
    command = [str(REPO_ROOT / "upstream" / "build.sh"), "kubevirt-plugins"]
    built = subprocess.run(command, capture_output=True, text=True, check=False)
    if built.returncode != 0:
        raise RuntimeError(f"upstream/build.sh kubevirt-plugins failed:\n{built.stderr[-4000:]}")
    return Path(built.stdout.strip().rpartition("=")[2]) / "kubevirt-plugins"


def kubevirt_tdx_plugin(node: RealNode) -> list[str]:
    """The command that runs KubeVirt's TDX plugin for ``node`` (``node.start_plugin("kubevirt", ...)``)."""
    return [str(kubevirt_plugins()), "--node-name", node.name, "--feature-gates", KUBEVIRT_TDX_GATE]


def guest_pod(
    name: str,
    node: RealNode,
    *,
    guest_args: tuple[str, ...] = (),
    requests: dict[str, int] | None = None,
    runtime_class: str | None = None,
    container: str = "compute",
    node_name: str | None = None,
    **metadata: object,
) -> dict:
    """A pod whose one container is teesim's guest (``make node``'s image) launching one TDX guest through
    ``node``'s kernel socket, with ``guest_args`` before the TEE (``-hold``, ``-not-before``, the retry flags):
    virt-launcher-shaped with extended-resource ``requests``, Kata-shaped with a ``runtime_class`` whose overhead
    holds the key. ``node_name`` binds it without the scheduler; ``metadata`` (``namespace``, ``labels``) goes to the
    pod's."""
    guest = {
        "name": container,
        "image": node.build["images"]["guest"],
        "imagePullPolicy": "Never",
        # The guest's error (the kernel's) becomes the container's termination message, readable from the API.
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "args": ["-socket", f"{GUEST_KERNEL_DIR}/kernel.sock", *guest_args, "tdx"],
        "volumeMounts": [{"name": "teesim-kernel", "mountPath": GUEST_KERNEL_DIR}],
    }
    if requests:
        devices = {resource: str(n) for resource, n in requests.items()}
        guest["resources"] = {"limits": devices, "requests": devices}
    kernel_dir = str(node.kernel_socket.parent)
    spec: dict = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": 5,
        "containers": [guest],
        "volumes": [{"name": "teesim-kernel", "hostPath": {"path": kernel_dir, "type": "Directory"}}],
    }
    if runtime_class:
        spec["runtimeClassName"] = runtime_class
    if node_name:
        spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, **metadata}, "spec": spec}


# tee-key-agent's entry point imported from this checkout (teesim._collection), whether or not make collection ran.
_AGENT_MAIN = (
    "import sys; from teesim._collection import collection_module; "
    "sys.exit(collection_module('plugins.module_utils.agent.cli').main())"
)


def tee_key_agent(
    node: RealNode, kubeconfig: Path, interval: float, reserve: dict[str, int]
) -> tuple[list[str], dict[str, str]]:
    """The collection's node agent (``tee-key-agent``, ``tee_key_pool_mode: kernel``) for ``node``, with the
    arguments its systemd unit and DaemonSet give it: its command and environment, for ``node._spawn("agent", ...)``.
    """
    command = [sys.executable, "-c", _AGENT_MAIN, "--node", node.name, "--host-root", str(node.root)]
    command += ["--kubeconfig", str(kubeconfig), "--interval", str(interval)]
    command += [f"--reserve={misc}={n}" for misc, n in sorted(reserve.items())]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT / "simulator"), env.get("PYTHONPATH")]))
    return command, env
