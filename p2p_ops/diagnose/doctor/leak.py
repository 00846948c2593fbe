"""The LMCache 0.5.6 lookup-job leak, detected and named (pure, over samples the gather took).

An owner keeps a P2P lookup job (`p2p_controller.py`, `_jobs`, no time limit) from `p2p_lookup_and_lock` until
the requester queries its result. A requester that gives up (its `--p2p-lookup-timeout` passed, its submit
wait of 3 s ran out, it died) never queries, so the job stays for good, and the L1 read locks it took stay
until `--l1-read-ttl-seconds` (300 s): those chunks can be neither evicted nor overwritten, which shows up as
`l1_oom` / `l1_contended` prefetch fallbacks. Fault runs here left 15-31 such jobs after a peer kill, an
engine kill and a link cut. The behaviour is in the installed lmcache 0.5.6 itself (`p2p_lookup_and_lock` adds
the job, only `p2p_query_lookup_results` pops it); the review of LMCache PR #3740 discussed abandoned lookups
holding read locks. No release we know of bounds the jobs' lifetime.

The evidence: jobs held on an owner in every sample of a short window while no requester has a lookup in
flight toward it (each requester's P2P adapter reports `in_flight_lookups`): nobody will ever query them, so
they are older than the requester's lookup timeout by construction.
"""

from __future__ import annotations

from p2p_ops.diagnose.doctor.agreement import restart
from p2p_ops.diagnose.doctor.model import FleetFacts, InstanceFacts
from p2p_ops.diagnose.findings import Report

UPSTREAM = ("lmcache 0.5.6's own p2p_controller.py: p2p_lookup_and_lock keeps the job until "
            "p2p_query_lookup_results pops it, with no time limit (see also the review of LMCache PR #3740)")


def _waiting_on(facts: FleetFacts, owner: str) -> int:
    """The most lookups any requester had in flight toward `owner` in one sample."""
    return max((int((sample.get("in_flight_to") or {}).get(owner, 0)) for req in facts.instances
                for sample in req.lookup_samples), default=0)


def _held(inst: InstanceFacts, field: str) -> int:
    """The least count seen over the samples: what never drained in the window."""
    return min((int(s.get(field) or 0) for s in inst.lookup_samples), default=0)


def check_lookup_leak(report: Report, facts: FleetFacts) -> None:
    for inst in facts.instances:
        if not inst.running or len(inst.lookup_samples) < 2:
            continue
        jobs, locks = _held(inst, "jobs"), _held(inst, "read_locked")
        if not jobs and not locks:
            continue
        waiting, prefetching = _waiting_on(facts, inst.instance), max(
            int(s.get("prefetch") or 0) for s in inst.lookup_samples)
        span = inst.lookup_samples[-1]["t"] - inst.lookup_samples[0]["t"]
        seen = (f"active_p2p_lookup_jobs>={jobs}, read_locked_count>={locks} in {len(inst.lookup_samples)} samples "
                f"over {span:.0f} s; requesters' lookups in flight toward it: {waiting}; its own prefetches: "
                f"{prefetching}")
        if jobs and not waiting and not locks:
            # Seen on a busy 2-core box beside a dead engine: a lookup that found nothing, abandoned. It pins no L1
            # object, so it explains no miss and no fallback: said, never ranked as the cause.
            report.add("info", "lookup_leak", inst.instance, seen,
                       f"{jobs} P2P lookup job(s) held on {inst.instance} with no requester waiting and no read lock: "
                       f"they pin nothing now (the lmcache {inst.lmc_version or '?'} leak; a restart drops them)")
        elif jobs and not waiting:
            report.add("error", "lookup_leak", inst.instance, seen,
                       f"{jobs} P2P lookup job(s) held on {inst.instance} with no requester waiting for them, older "
                       f"than its requesters' --p2p-lookup-timeout ({facts.lookup_timeout_s:g} s) by construction "
                       f"(lmcache {inst.lmc_version or '?'}). Upstream: {UPSTREAM}", "lookup_leak",
                       restart=restart(facts, [inst.instance], "server"))
        elif locks and not waiting and not prefetching:
            report.add("warn", "stale_read_locks", inst.instance, seen,
                       f"{locks} L1 object(s) of {inst.instance} stay read-locked with nothing in flight. Upstream: "
                       f"{UPSTREAM}", "stale_read_locks", restart=restart(facts, [inst.instance], "server"))
