"""Diagnose: checks that read facts and report findings naming the subject, the value and the cause, whose fix the
one catalogue words (`p2p_ops.causes`).

- `doctor/`: does a fleet's peers agree on what must match, can they reach each other (gather, then pure checks)
- `tree/`: the symptom decision tree (`p2pctl diagnose SYMPTOM`)
- `rdma/`: RDMA readiness (ports, GIDs, uverbs, memlock, GPUDirect, GPU/NIC affinity, TCP fallback)
- `rails`: per-NIC byte counters around a transfer
- `nixl/`: a real NIXL READ under a candidate UCX environment, and what its failures mean
- `traces`: UCX/NIXL logs as a report
- `judge/`: the one judge of causes: the rules that pick a cause of the catalogue for a fleet's state, a chunk's
  miss, a failed proof pair and a measured margin; every verb that says why reads it
- `signatures`: every log signature, once (signatures.yaml), with the cause it names
- `bundle` (+ `redact`): the redacted debug bundle to attach to an issue
All return `findings.Report`, whose exit code is 0 healthy, 1 findings, 2 could not check.
"""
