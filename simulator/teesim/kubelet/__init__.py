"""The kubelet's device-plugin side: a pure device-manager model and a real gRPC kubelet.

gRPC's C core logs connection teardown (GOAWAY on every kubelet restart) at info level; the
simulator restarts kubelets on purpose, so keep its log to errors unless the user asks otherwise.
This must happen before ``grpc`` is first imported.
"""

import os

os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
