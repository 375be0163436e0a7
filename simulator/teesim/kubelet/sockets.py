"""Where the kubelet's sockets live under a node root, and how both sides open channels to them."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import grpc

KUBELET_DIR = "var/lib/kubelet"
DEVICE_PLUGINS = "device-plugins"
POD_RESOURCES = "pod-resources"
KUBELET_SOCKET = "kubelet.sock"
# sockaddr_un.sun_path is 108 bytes including the terminating NUL.
MAX_SOCKET_PATH = 107
DIAL_TIMEOUT = 10.0  # the kubelet's connection timeout for plugin sockets
# gRPC backs off 1 s (growing to 120 s) after a failed connect. Sockets here are local and come back
# within milliseconds of a restart, so a short, capped backoff keeps re-registration and the
# reconciling plugin's pod-resources calls from idling behind a long retry timer.
LOCAL_CHANNEL_OPTIONS = (
    ("grpc.initial_reconnect_backoff_ms", 20),
    ("grpc.min_reconnect_backoff_ms", 20),
    ("grpc.max_reconnect_backoff_ms", 500),
)


def kubelet_dir(root: str | os.PathLike[str]) -> Path:
    return Path(root) / KUBELET_DIR


def device_plugin_dir(kubelet: str | os.PathLike[str]) -> Path:
    return Path(kubelet) / DEVICE_PLUGINS


def pod_resources_socket(kubelet: str | os.PathLike[str]) -> Path:
    return Path(kubelet) / POD_RESOURCES / KUBELET_SOCKET


def registration_socket(kubelet: str | os.PathLike[str]) -> Path:
    return device_plugin_dir(kubelet) / KUBELET_SOCKET


def check_socket_path(path: str | os.PathLike[str]) -> str:
    """The path as a string, or a ValueError that says why it cannot be a Unix socket."""
    text = os.fspath(path)
    if len(text.encode()) > MAX_SOCKET_PATH:
        raise ValueError(
            f"Unix socket path {text!r} is {len(text.encode())} bytes, "
            f"over the {MAX_SOCKET_PATH}-byte limit: "
            "use a shorter node root (e.g. a directory directly under /tmp)"
        )
    return text


def socket_target(path: str | os.PathLike[str]) -> str:
    """gRPC target for a Unix socket path."""
    return "unix:" + os.path.abspath(check_socket_path(path))


def is_socket(path: str | os.PathLike[str]) -> bool:
    try:
        return stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        return False


def socket_identity(path: str | os.PathLike[str]) -> tuple[int, int, int] | None:
    """(device, inode, ctime) of a socket file, to notice it being recreated; None when absent."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISSOCK(st.st_mode):
        return None
    return (st.st_dev, st.st_ino, st.st_ctime_ns)


def channel(path: str | os.PathLike[str]) -> grpc.Channel:
    """A channel to a Unix socket. It connects lazily: make the first call with ``wait_for_ready=True``
    and a timeout, which is how a blocking dial with a deadline looks in gRPC Python. (Waiting with
    ``channel_ready_future`` instead makes ``close()`` linger ~0.2 s on gRPC's connectivity poller.)"""
    return grpc.insecure_channel(socket_target(path), options=LOCAL_CHANNEL_OPTIONS)
