"""Many-to-one and one-to-many for N nodes (nixlbench's patterns) on LMCache's transfer channel, beside pairwise.

- many-to-one: every other node serves its own source objects, the hub reads from all of them at once (a node
  pulling a prefix whose chunks sit on several peers, or a new node warming up);
- one-to-many: the hub serves, every other node reads from it at once (a hot prefix everyone pulls).

Concurrent clients start as separate processes (seconds of import each), so each one, once connected, waits for a
common wall-clock start (`P2P_START_AT`, the client wrapper in p2p_ops.bench.channel) and then times its reads; a client
that connects after it says so (`start_wait_s` < 0) and the row is marked not overlapped. A row's aggregate is
the bytes every reader got in one read round over the slowest reader's p50 (the round ends when the last read
does).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Mapping, Optional, Sequence

from p2p_ops.bench import channel
from p2p_ops.errors import BadInput

PATTERNS = ("pairwise", "many-to-one", "one-to-many")
# Lead before a round's common start: the clients' imports (torch, NIXL) on a busy 2-core box, or over SSH.
START_LEAD_S = 30.0


@dataclass(frozen=True)
class Link:
    source: str
    reader: str
    server: channel.Side
    client: channel.Side
    ports: channel.Ports


def plan_links(pattern: str, hub: str, others: Sequence[str], sides: Mapping[str, channel.Side],
               new_port: Callable[[], int]) -> list[Link]:
    if pattern not in PATTERNS[1:]:
        raise BadInput(f"--pattern {pattern!r}: pick one of {', '.join(PATTERNS)}")
    if not others:
        raise BadInput(f"--pattern {pattern} needs at least two nodes; the fleet has only {hub}")
    if pattern == "many-to-one":
        return [Link(o, hub, sides[o], sides[hub], channel.Ports(new_port(), new_port(), new_port())) for o in others]
    shared = (new_port(), new_port())
    return [Link(hub, o, sides[hub], sides[o], channel.Ports(*shared, new_port())) for o in others]


def _round(links: Sequence[Link], opts: channel.Options, count: int, lead_s: float) -> list[channel.ChannelRun]:
    start_at = time.time() + lead_s
    with ThreadPoolExecutor(max_workers=len(links)) as pool:
        jobs = [pool.submit(channel.run_client, k.server, k.client, opts, k.ports, count, start_at) for k in links]
        return [j.result() for j in jobs]


def run_links(links: Sequence[Link], opts: channel.Options, lead_s: float = START_LEAD_S,
              around: Optional[channel.Around] = None) -> list[list[channel.ChannelRun]]:
    # One server per source and transfer port: one-to-many's links share the hub's.
    servers = {(k.source, k.ports.transfer): (k.server, k.ports) for k in links}
    return channel.run_rounds(list(servers.values()), opts, lambda n: _round(links, opts, n, lead_s), around)


def aggregate(runs: Sequence[channel.ChannelRun]) -> dict:
    payload = sum(r.payload_bytes for r in runs)
    p50s = [r.p50_ms for r in runs if r.p50_ms is not None]
    ok = all(r.ok for r in runs) and len(p50s) == len(runs)
    slowest = max(p50s) if p50s else None
    return {"num_objects": runs[0].num_objects, "object_size": runs[0].object_size, "payload_bytes": payload,
            "ok": ok, "p50_ms": slowest, "p99_ms": max((r.p99_ms or 0 for r in runs), default=None),
            "median_gbps": round(payload / slowest / 1e6, 3) if ok and slowest else None,
            "verified": all(r.verified for r in runs),
            "overlapped": all((r.start_wait_s or 0) >= 0 for r in runs),
            "error": next((r.error for r in runs if not r.ok), ""),
            "note": next((r.note for r in runs if r.note), ""),
            "links": [r.to_dict() for r in runs]}
