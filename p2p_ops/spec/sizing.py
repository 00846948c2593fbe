"""How big each node of a local fleet can be on the box it runs on: L1 per server, engine KV per engine.

A fleet on one machine holds, per node, an `lmcache server` (its process plus its whole L1, which it touches at
start) and an engine (its process plus its paged KV), and one coordinator. `size_nodes` picks the most generous
step of a ladder whose total fits the memory budget, and otherwise says plainly that the fleet does not fit and
how many nodes would. Pure: `p2pctl init` passes the budget it read (facts.memory) or the one it was given.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from p2p_ops.errors import BadInput
from p2p_ops.facts.base import Runner, run_local
from p2p_ops.facts.memory import MEMINFO
from p2p_runtime.profiles import TINY, KVProfile
from p2p_runtime.profiles import resolve as resolve_profile

GIB = 1 << 30
# Resident memory of each process before its L1 or KV (lmcache 0.5.6 with NIXL on a CPU box, torch CPU):
# `ps -o rss` of idle processes of a local fleet here: servers 1.6 GB with 1 GiB of L1, engines 0.57 GB with the
# tiny 64 MiB KV (lmcache imported), the coordinator 0.35 GB.
SERVER_BASE_GIB = 0.6
ENGINE_BASE_GIB = 0.5
COORDINATOR_GIB = 0.35
# The share of MemAvailable a fleet may take by default: a shared box keeps room for others.
BUDGET_SHARE = 0.75
# (L1 GiB, engine context tokens), most generous first; "kv" means: twice the engine's own KV of one context.
REAL_LADDER: tuple[tuple[float | str, int], ...] = (("kv", 8192), (1.0, 8192), (0.5, 8192), (0.5, 4096),
                                                     (0.25, 4096), (0.25, 2048))
TINY_LADDER: tuple[tuple[float | str, int], ...] = ((1.0, 8192), (0.5, 8192), (0.25, 8192), (0.125, 8192))
TINY_BLOCKS = 2048
# The smallest L1 worth running: it must hold a few whole chunks of the profile and the pulls it stages.
MIN_L1_CHUNKS = 8


@dataclass(frozen=True)
class NodeSize:
    l1_size_gb: float
    max_model_len: int
    num_blocks: int
    kv_gib: float

    def per_node_gib(self) -> float:
        return SERVER_BASE_GIB + self.l1_size_gb + ENGINE_BASE_GIB + self.kv_gib

    def fleet_gib(self, n: int) -> float:
        return COORDINATOR_GIB + n * self.per_node_gib()


def box_budget_gib(runner: Runner = run_local) -> Optional[float]:
    """None when /proc/meminfo says nothing."""
    mem = MEMINFO.collect(runner)
    return mem.available_bytes * BUDGET_SHARE / GIB if mem else None


def describe_sizing(data: dict, budget: Optional[float]) -> str:
    e, s = data["engine"], data["settings"]
    per_token = resolve_profile(e["profile"], e["num_layers"], e["num_heads"], e["head_size"]).bytes_per_token
    kv_gib = e["num_blocks"] * e["block_size"] * per_token / GIB
    where = f"a budget of {budget:.1f} GiB" if budget is not None else "no memory limit (MemAvailable unreadable)"
    return (f"sized for {where}: per node L1 {s['l1_size_gb']:g} GiB, engine KV {kv_gib:.2f} GiB "
            f"({e['num_blocks']} blocks, context {e['max_model_len']} tokens, {per_token // 1024} KiB per token)")


def node_size(profile: KVProfile, l1: float | str, context: int) -> NodeSize:
    """One ladder step for a profile: the engine holds one full context (its blocks), L1 at least MIN_L1_CHUNKS
    chunks (rounded up to 1/16 GiB: whole l1_align_bytes pages for any alignment up to 64 MiB, as spec.startup
    requires). The tiny profile keeps the engine's default 2048 blocks (64 MiB), as before sizing existed: room for
    several requests in flight costs nothing there."""
    blocks = TINY_BLOCKS if profile.name == TINY else math.ceil(context / profile.block_size)
    kv_gib = blocks * profile.block_size * profile.bytes_per_token / GIB
    l1_gib = 2 * context * profile.bytes_per_token / GIB if l1 == "kv" else float(l1)
    l1_gib = max(l1_gib, MIN_L1_CHUNKS * profile.chunk_bytes / GIB)
    l1_gib = math.ceil(l1_gib * 16) / 16
    return NodeSize(l1_gib, context, blocks, kv_gib)


def size_nodes(n: int, profile: KVProfile, budget: Optional[float]) -> NodeSize:
    """The most generous step that fits `budget` GiB for n nodes (None: no limit). When even the leanest step
    does not, BadInput names what it needs and how many nodes would fit."""
    steps = [node_size(profile, l1, ctx) for l1, ctx in (TINY_LADDER if profile.name == TINY else REAL_LADDER)]
    fitting = [s for s in steps if budget is None or s.fleet_gib(n) <= budget]
    if fitting or budget is None:
        return fitting[0]
    lean = steps[-1]
    fits = max(0, int((budget - COORDINATOR_GIB) // lean.per_node_gib()))
    advice = f"use --local {fits} or fewer" if fits >= 2 else "free memory first"
    raise BadInput(
        f"--local {n} --profile {profile.name} will not fit memory: even lean nodes need {lean.fleet_gib(n):.1f} GiB "
        f"({n} x (server {SERVER_BASE_GIB} + L1 {lean.l1_size_gb:g} + engine {ENGINE_BASE_GIB} + KV "
        f"{lean.kv_gib:.2f} GiB for {lean.max_model_len} tokens) + coordinator {COORDINATOR_GIB}), the budget is "
        f"{budget:.1f} GiB; {advice}, pick a smaller --profile, or set --memory-budget GIB")
