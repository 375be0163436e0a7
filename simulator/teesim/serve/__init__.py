"""``teesim serve``: one scenario node in real time, for device plugins written outside teesim.

The same engine as ``teesim run`` (:class:`teesim.sim.simulation.Simulation`: arrivals,
scheduler, the node's kubelet model with admission, launches (ENOSPC/EBUSY), Kata sandbox retries, the report's
metrics), with three things swapped for the real ones: the clock follows the wall clock (:mod:`teesim.serve.clock`),
the kernel's files are written to a real directory as they change, and the kubelet is the real-socket
one of :mod:`teesim.kubelet.server`, whose device manager *is* the node's, so whatever plugins register
on ``<root>/var/lib/kubelet/device-plugins/kubelet.sock`` is what the scheduler sees, and the node's
kubelet model admits through it (:class:`teesim.serve.engine.ServeNodeKubelet`). ``teesim.serve.cli`` is
the command and its report.
"""
