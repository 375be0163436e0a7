"""teesim's device plugins: the shared reconcile decision and the real gRPC plugin processes."""
