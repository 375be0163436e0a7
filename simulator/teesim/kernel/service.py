"""teesim's kernel as a service: real processes launch TEE guests against a node's simulated misc tree.

A guest of the real node (``tools/node/guest``, a container's entrypoint) would open ``/dev/kvm`` and create a
TD or an SNP guest; here it connects to this service's unix socket and asks for one launch instead. The service
does what KVM does (:class:`teesim.kernel.kvm.KvmKeys`, the same model ``teesim run`` and ``teesim serve`` use):

* it charges the cgroup of the *calling process*, as ``misc_cg_try_charge`` charges the cgroup of the task that
  creates the guest: the peer's pid comes from ``SO_PEERCRED`` and its cgroup from ``/proc/<pid>/cgroup``
  (the unified line where the process has one, else the memory controller's, the hierarchy runc places
  containers in on a cgroup v1 host), less ``cgroup_prefix`` (the kubelet's ``cgroupRoot``), so the tree shows
  ``kubepods/...`` as on a node whose kubelet owns the root;
* it answers with the model's verdict (``ENOSPC`` for TDX KeyIDs, ``EBUSY`` at a ``misc.max`` or the capacity,
  ``EINVAL`` without capacity), and keeps the charge while the connection stays open: when the guest exits,
  however it exits, the kernel closes its end and the key is released, as KVM releases it when the VM's file
  descriptor is closed;
* after every change it rewrites the node's misc files under ``root`` (:class:`teesim.kernel.backends.NodeWriter`),
  so NFD, the device plugins and ``kubectl`` readers see the same counts.

Protocol, one line each way: the guest sends ``launch RESOURCE AMOUNT [GUEST]`` (``GUEST``: ``snp`` or ``sev-es``
for ``sev_es``), the service answers ``ok CGROUP`` or ``error ERRNO_NAME MESSAGE``. The service is single-threaded
(one ``selectors`` loop), like the model, which assumes no concurrent charge.
"""

from __future__ import annotations

import errno
import os
import selectors
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from teesim.kernel.backends import NodeWriter, RealDirBackend
from teesim.kernel.kvm import KvmKeys
from teesim.kernel.misc import ChargeError
from teesim.kernel.node import Node

_REQUEST_LIMIT = 256  # one short line; anything longer is refused


def peer_pid(conn: socket.socket) -> int:
    """The pid of the process at the other end of a unix socket (``SO_PEERCRED``, in our pid namespace)."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, _uid, _gid = struct.unpack("3i", creds)
    return pid


def cgroup_of(proc_cgroup: str, prefix: str = "") -> str:
    """The cgroup a charge goes to, from the text of ``/proc/<pid>/cgroup``, relative to ``prefix``.

    The unified line (``0::/path``) when it names a cgroup below the root, else the memory controller's line (a
    cgroup v1 host where the unified hierarchy is not used); ``prefix`` (the kubelet's cgroup root) is removed.
    """
    unified = memory = None
    for line in proc_cgroup.splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and not controllers:
            unified = path
        elif "memory" in controllers.split(","):
            memory = path
    path = unified if unified not in (None, "/") else memory
    if path is None:
        raise OSError(errno.ESRCH, "the process has no unified or memory cgroup")
    parts = [part for part in path.split("/") if part]
    base = [part for part in prefix.split("/") if part]
    if base and parts[: len(base)] == base:
        parts = parts[len(base) :]
    return "/".join(parts)


@dataclass
class Launch:
    """One guest holding keys: what it charged and where."""

    cgroup: str
    resource: str
    amount: int
    guest: str | None


@dataclass
class KernelService:
    """The node's kernel model behind a unix socket (see the module docstring)."""

    node: Node
    root: Path
    cgroup_prefix: str = ""
    launches: dict[int, Launch] = field(default_factory=dict)
    created: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.writer = NodeWriter(RealDirBackend(self.root))
        self.writer.sync(self.node.files())
        self._wake_reader, self._wake_writer = socket.socketpair()

    def stop(self) -> None:
        """End :meth:`serve` from another thread (guests still holding keys keep them in the model)."""
        self._wake_writer.send(b"x")

    @property
    def misc(self) -> KvmKeys | None:
        return self.node.misc

    def launch(self, pid: int, request: str) -> tuple[str, Launch | None]:
        """Handle one request line from process ``pid``; returns the answer line and the launch held, if any."""
        words = request.split()
        if len(words) not in (3, 4) or words[0] != "launch" or not words[2].isdigit():
            return f"error EINVAL bad request {request[:60]!r}: expected 'launch RESOURCE AMOUNT [GUEST]'", None
        resource, amount, guest = words[1], int(words[2]), words[3] if len(words) == 4 else None
        if self.misc is None:
            return "error EINVAL this kernel has no misc controller", None
        try:
            cgroup = cgroup_of(Path(f"/proc/{pid}/cgroup").read_text(), self.cgroup_prefix)
        except OSError as gone:
            return f"error {errno.errorcode.get(gone.errno or 0, 'EIO')} cgroup of pid {pid}: {gone.strerror}", None
        if not self.misc.has_cgroup(cgroup):
            self.misc.ensure_cgroup(cgroup)
            self.created.add(cgroup)
        try:
            self.misc.try_charge(cgroup, resource, amount, guest=guest)
        except ChargeError as refused:
            answer = f"error {errno.errorcode.get(refused.errno or 0, 'EIO')} {refused.strerror}"
        except (OSError, ValueError) as wrong:
            answer = f"error EINVAL {wrong}"
        else:
            self.writer.sync(self.node.files())
            return f"ok /{cgroup}", Launch(cgroup, resource, amount, guest)
        self._forget_empty(cgroup)
        self.writer.sync(self.node.files())  # a refused charge still counts misc.events
        return answer, None

    def release(self, launch: Launch) -> None:
        """The guest's end closed: uncharge what it held and drop the cgroup if the service made it."""
        assert self.misc is not None
        self.misc.uncharge(launch.cgroup, launch.resource, launch.amount, guest=launch.guest)
        self._forget_empty(launch.cgroup)
        self.writer.sync(self.node.files())

    def _forget_empty(self, cgroup: str | None) -> None:
        """Remove cgroups this service created once nothing holds a charge there (the runtime's rmdir)."""
        while cgroup and cgroup in self.created and self.misc is not None:
            if any(held.cgroup == cgroup for held in self.launches.values()):
                return
            try:
                self.misc.remove_cgroup(cgroup)
            except OSError:
                return  # children or charges left: the kernel refuses the rmdir too
            self.created.discard(cgroup)
            cgroup = cgroup.rpartition("/")[0]

    def serve(self, sock_path: Path, ready: Callable[[], None] | None = None) -> None:
        """Accept guests on ``sock_path`` until the process is signalled (KeyboardInterrupt or SystemExit)."""
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(sock_path))
        os.chmod(sock_path, 0o660)
        listener.listen(64)
        selector = selectors.DefaultSelector()
        selector.register(listener, selectors.EVENT_READ, None)
        selector.register(self._wake_reader, selectors.EVENT_READ, "stop")
        if ready is not None:
            ready()
        try:
            while True:
                for key, _ in selector.select():
                    if key.data == "stop":
                        return
                    if key.data is None:
                        conn, _ = listener.accept()
                        selector.register(conn, selectors.EVENT_READ, b"")
                    else:
                        self._readable(selector, key)
        finally:
            for key in list(selector.get_map().values()):
                if key.data != "stop":
                    key.fileobj.close()  # type: ignore[union-attr]
            selector.close()
            sock_path.unlink(missing_ok=True)

    def _readable(self, selector: selectors.BaseSelector, key: selectors.SelectorKey) -> None:
        conn: socket.socket = key.fileobj  # type: ignore[assignment]
        data = conn.recv(_REQUEST_LIMIT)
        held = self.launches.pop(conn.fileno(), None)
        if not data or held is not None:  # closed (or a second request: the one launch per guest ends)
            selector.unregister(conn)
            conn.close()
            if held is not None:
                self.release(held)
            return
        buffered = key.data + data
        if b"\n" not in buffered and len(buffered) < _REQUEST_LIMIT:
            selector.modify(conn, selectors.EVENT_READ, buffered)
            return
        line = buffered.split(b"\n", 1)[0].decode("ascii", "replace")
        answer, launch = self.launch(peer_pid(conn), line)
        conn.sendall(answer.encode("ascii", "replace") + b"\n")
        if launch is None:
            selector.unregister(conn)
            conn.close()
            return
        self.launches[conn.fileno()] = launch
        selector.modify(conn, selectors.EVENT_READ, b"")
