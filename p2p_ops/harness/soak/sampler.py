"""Samples of what each fleet process costs and holds, every few seconds: resident and anonymous memory, open
fds, threads, CPU seconds (`facts.proc_usage`, one read per node), and per lmcache server its L1 use and what it
has in flight (P2P lookup jobs, prefetch jobs, L1 read locks: `faults.drain.inflight`)."""

from __future__ import annotations

import time
from dataclasses import dataclass, fields
from typing import Optional

from p2p_ops.endpoints import lmcache_api
from p2p_ops.facts.proc_usage import usage_fact
from p2p_ops.facts.sections import read_fact
from p2p_ops.harness.faults.drain import inflight
from p2p_ops.lifecycle import procs
from p2p_ops.lifecycle.context import FleetContext
from p2p_ops.spec.units import Unit


@dataclass
class Row:
    t: float
    unit: str
    role: str
    pid: Optional[int]
    state: str
    rss_mib: Optional[float] = None
    anon_mib: Optional[float] = None
    shmem_mib: Optional[float] = None
    fds: Optional[int] = None
    threads: Optional[int] = None
    cpu_s: Optional[float] = None
    l1_used_mib: Optional[float] = None
    lookup_jobs: Optional[int] = None
    prefetch_jobs: Optional[int] = None
    read_locks: Optional[int] = None


FIELDS = [f.name for f in fields(Row)]


def soak_units(ctx: FleetContext) -> list[Unit]:
    """The processes `up` started (coordinator, servers, engines, router), the ones a soak watches."""
    return [u for u in ctx.units() if u.phase is not None]


def _mib(b: int) -> float:
    return round(b / 2**20, 2)


def sample(ctx: FleetContext, units: list[Unit], t: float) -> list[Row]:
    rows: list[Row] = []
    nodes = {u.node.name: u.node for u in units if u.node is not None}
    for node in nodes.values():
        mine = [u for u in units if u.node is not None and u.node.name == node.name]
        states = procs.states(ctx.conn(node), [ctx.proc(u) for u in mine])
        pids = [st.pid for st in states if st.running and st.pid]
        usage = read_fact(ctx.conn(node), usage_fact(pids), timeout=30) if pids else {}
        for u, st in zip(mine, states):
            row = Row(round(t, 2), u.name, u.role, st.pid, st.state)
            got = usage.get(st.pid) if st.running else None
            if got:
                row.rss_mib, row.anon_mib, row.shmem_mib = _mib(got.rss_bytes), _mib(got.anon_bytes), \
                    _mib(got.shmem_bytes)
                row.fds, row.threads, row.cpu_s = got.fds, got.threads, got.cpu_s
            if u.role == "server" and st.running:
                server = lmcache_api.server_status(ctx.server_url(u.node, u.instance))
                counts = inflight(server.raw)
                if counts:
                    row.l1_used_mib, row.read_locks = _mib(server.l1_used), counts["read_locked_count"]
                    row.lookup_jobs = counts["active_p2p_lookup_jobs"]
                    row.prefetch_jobs = counts["active_prefetch_jobs"]
            rows.append(row)
    return rows


class Sampler:
    """Samples every `every_s` from the caller's loop (`due()` then `take()`): no thread of its own, so the
    soak's timing is one loop the reader can follow."""

    def __init__(self, ctx: FleetContext, t0: float, every_s: float) -> None:
        self.ctx, self.t0, self.every_s = ctx, t0, every_s
        self.units = soak_units(ctx)
        self.rows: list[Row] = []
        self._next = 0.0

    def due(self) -> bool:
        return time.monotonic() - self.t0 >= self._next

    def take(self) -> None:
        t = time.monotonic() - self.t0
        self._next = t + self.every_s
        self.rows.extend(sample(self.ctx, self.units, t))
