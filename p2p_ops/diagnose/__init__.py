"""Diagnose: checks that read facts and report findings naming the subject, the value and the fix.

- `rdma` / `rdma_host`: RDMA readiness (ports, GIDs, uverbs, memlock, GPUDirect, GPU/NIC affinity, TCP fallback)
- `rails`: per-NIC byte counters around a transfer
- `nixl_probe` (+ `nixl_peer`, `nixl_failures`): a real NIXL READ under a candidate UCX environment
- `trace_report`: UCX/NIXL logs as a report
All return `findings.Report`, whose exit code is 0 healthy, 1 findings, 2 could not check.
"""
