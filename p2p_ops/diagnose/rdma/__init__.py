"""RDMA readiness of one host: `check` reads the facts from a host view (live, fixture tree or bundle snapshot)
and judges them, purely."""
