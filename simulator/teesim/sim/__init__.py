"""The simulation: the environment that runs a world (:mod:`~teesim.sim.simulation`) and the scenario loader
that builds one from YAML (:mod:`~teesim.sim.scenario`), side by side.

It stands above the strategies (which advertisers a node runs) and below the report (which reads a run).
"""
