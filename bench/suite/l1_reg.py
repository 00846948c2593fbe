"""What an L1 of 1-8 GiB costs a `lmcache server` at start: time until registered, and resident memory.

With P2P on, LMCache 0.5.6 registers the whole L1 with NIXL when the server starts (transfer_channel/
nixl_channel.py `register_memory`); upstream reports a throughput cliff above 4 GiB (LMCache PR #4432). A
one-node local fleet is started per L1 size twice, P2P on and off, so the difference of the two start times is
the registration (allocation, pinning and the rest of the start are in both). Resident memory is the server
session's RSS right after `wait` (`facts.proc_usage`): it says whether L1 is touched at start or as it fills.
Sizes that would not fit this box's budget are skipped and said so.
"""

from __future__ import annotations

from typing import Optional

from p2p_ops.lifecycle import launch
from p2p_ops.lifecycle.free_ports import choose
from p2p_ops.spec.starter import local_fleet
from p2p_ops.facts.proc_usage import usage_fact
from p2p_ops.facts.sections import read_fact
from p2p_ops.lifecycle import procs
from p2p_ops.spec.sizing import box_budget_gib

SIZES_GIB = {"tiny": [1], "quick": [1, 4], "full": [1, 2, 4, 8]}
MODES = (True, False)  # P2P on, then off: the registration is their difference


def server_start(l1_gib: int, p2p: bool) -> dict:
    """Start a one-node fleet with this L1; seconds until up+registered and the server's RSS (MiB)."""
    timings: dict[str, float] = {}
    data = local_fleet(1, name=f"l1reg-{l1_gib}", base=choose(1).base)
    data["settings"].update(l1_size_gb=l1_gib, p2p=p2p)
    with launch.temporary(data, timings=timings) as ctx:
        unit = ctx.unit("server", ctx.fleet.instances()[0][1])
        conn = ctx.conn(unit.node)
        state = procs.states(conn, [ctx.proc(unit)])[0]
        usage = read_fact(conn, usage_fact([state.pid]), timeout=30).get(state.pid) if state.pid else None
    return {"start_s": timings["up_s"] + timings["wait_s"],
            "rss_mib": usage.rss_bytes / 2**20 if usage else None,
            "shmem_mib": usage.shmem_bytes / 2**20 if usage else None}


def registration_s(on: dict, off: dict) -> Optional[float]:
    """What registering L1 with NIXL added to the start (never below 0: the two starts jitter)."""
    return max(0.0, on["start_s"] - off["start_s"])


def run(report) -> None:
    t = report.table("l1_reg", "L1 size against the server's start (P2P on: L1 registered with NIXL) and memory",
                     ["L1 GiB", "start s P2P on", "start s P2P off", "registration s", "RSS MiB P2P on",
                      "RSS MiB P2P off", "shmem MiB P2P on"],
                     plot=("L1 GiB", ["start s P2P on", "start s P2P off", "registration s"], "seconds", False))
    budget = box_budget_gib()
    for gib in SIZES_GIB[report.size]:
        if budget is not None and gib + 2 > budget:
            report.note(t, f"skipped {gib} GiB: the box's budget is {budget:.1f} GiB (75% of MemAvailable)")
            continue
        on, off = (server_start(gib, p2p) for p2p in MODES)
        report.add_row(t, **{"L1 GiB": gib, "start s P2P on": on["start_s"], "start s P2P off": off["start_s"],
                             "registration s": registration_s(on, off), "RSS MiB P2P on": on["rss_mib"],
                             "RSS MiB P2P off": off["rss_mib"], "shmem MiB P2P on": on["shmem_mib"]})
    report.note(t, "start = `up` + `wait` of a one-node fleet (coordinator, server, engine); the engine's and the "
                   "coordinator's start are in both columns, so `registration s` is the server's extra time with P2P")
