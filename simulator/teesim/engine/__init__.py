"""The ground every other room stands on: the discrete-event clock (:mod:`teesim.engine.clock`).

Domain-free, as SimPy's environment is: it knows instants and callbacks, never nodes, pods or keys, and
imports nothing else of teesim. ``teesim serve``'s wall-paced clock (:mod:`teesim.serve.clock`) builds on it.
"""
