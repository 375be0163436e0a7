"""teesim's device plugins: the shared reconcile decision (:mod:`~teesim.plugins.reconcile`), the real gRPC
plugin processes (:mod:`~teesim.plugins.base`, ``static``, ``reconciling``, ``unified``) and, beside them, the
in-process models of the same advertisers that ``teesim run`` drives (:mod:`~teesim.plugins.models`).

Layer: this room sits above ``cluster``. The models stand on a simulated node as the cluster model builds it
(``SimNode``: its host files, its device manager, its DRA pool), and a narrow protocol in their place would
mean rewriting them when they only moved here; the gRPC plugins import nothing of ``cluster``, and nothing
in ``cluster`` imports a plugin, so the order costs neither side.
"""
