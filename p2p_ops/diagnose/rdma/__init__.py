"""RDMA readiness of one host: `inputs` reads the facts from a host view (live, fixture tree or bundle
snapshot), `check` (per port) and `host_checks` (host-wide) judge them, purely."""
