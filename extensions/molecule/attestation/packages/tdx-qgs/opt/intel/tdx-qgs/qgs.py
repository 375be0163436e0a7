"""Stand-in for Intel's qgs 1.26 (Molecule tests only): the real binary needs Intel's repository and SGX.

Like QGS 1.26 it reads /etc/qgs.conf (whitespace removed, '#' comments; any 'port' line means vsock), takes
-p=, -n= and --no-daemon, daemonizes before binding, removes a stale socket, creates the socket with mode
0660 from the first moment and answers connections. It does not generate quotes.
"""

import os
import signal
import socket
import sys

SOCKET = "/var/run/tdx-qgs/qgs.socket"


def config_port():
    port = None
    try:
        with open("/etc/qgs.conf") as handle:
            for raw in handle:
                line = "".join(raw.split())
                if line.startswith("#") or "=" not in line:
                    continue
                name, _equals, value = line.partition("=")
                if name == "port":
                    port = int(value)
    except FileNotFoundError:
        print("Failed to open config file /etc/qgs.conf")
    return port


def main():
    port, daemon = config_port(), True
    for arg in sys.argv[1:]:
        if arg == "--no-daemon":
            daemon = False
        elif arg.startswith("-p="):
            port = int(arg[3:])
        elif not arg.startswith(("-n=", "-l=")):
            sys.exit(f"Usage: {sys.argv[0]} [--no-daemon] [-p=port_number] [-n=number_threads] [-l=log_level]")
    if daemon and os.fork():
        os._exit(0)
    if port is not None:
        server = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)
        server.bind((socket.VMADDR_CID_ANY, port))
    else:
        os.makedirs(os.path.dirname(SOCKET), exist_ok=True)
        if os.path.exists(SOCKET):
            os.unlink(SOCKET)
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        previous = os.umask(0o117)
        server.bind(SOCKET)
        os.umask(previous)
        os.chmod(SOCKET, 0o660)
    server.listen(16)
    signal.signal(signal.SIGTERM, stop if port is None else lambda _signum, _frame: os._exit(0))
    while True:
        client, _address = server.accept()
        client.close()


def stop(_signum, _frame):
    """SIGTERM for the Unix listener: remove its socket, as QGS does when it shuts down."""
    if os.path.exists(SOCKET):
        os.unlink(SOCKET)
    os._exit(0)


if __name__ == "__main__":
    main()
