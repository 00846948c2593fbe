"""Why a pair of the matrix failed.

What the pair's own requests showed comes first (the request failed, the answer differed, a hit on the target's
own L1); everything about the fleet (registration, advertised URLs, peer lists, reachability, must-agree
settings) is the one judge's (`diagnose.judge`), read once for all failing pairs and narrowed to the pair's two
instances and nodes.
"""

from __future__ import annotations

from typing import Optional, Protocol

from p2p_ops.diagnose import judge
from p2p_ops.lifecycle.context import FleetContext


class Pair(Protocol):
    """What a cause reads of a failing `matrix.Pair` (a protocol: matrix imports this module, not the reverse)."""

    source: str
    target: str
    need: int
    cached_tokens: int
    p2p_loads: float
    identical: bool
    mismatch_tokens: float
    error: str
    cause: str


def explain(ctx: FleetContext, failing: list[Pair]) -> None:
    """Fill `cause` of every failing pair (in place)."""
    verdict: Optional[judge.Judgement] = None
    for pair in failing:
        pair.cause = request_cause(pair)
        if pair.cause:
            continue
        if verdict is None:
            verdict = judge.judge(ctx)
        about = {pair.source, pair.target} | {ctx.fleet.instance(i)[0].name for i in (pair.source, pair.target)}
        pair.cause = pair_cause(verdict, about)


def request_cause(p: Pair) -> str:
    """What the pair's requests themselves prove ("" when they prove nothing about why)."""
    if p.error.startswith("source "):
        return p.error
    if p.error:
        return f"the request to {p.target} failed ({p.error[:120]}): check its engine (`p2pctl status`, engine.log)"
    if p.mismatch_tokens:
        return (f"{p.target} loaded {p.mismatch_tokens:g} token(s) whose KV bytes disagree: a corrupted or mis-laid "
                "transfer, or the peers' engine.profile differs")
    if p.cached_tokens >= p.need and p.p2p_loads > 0 and not p.identical:
        return (f"{p.target} used {p.source}'s KV but answered differently: the engines disagree on the model "
                "(engine.model_seed, layers, profile)")
    if p.cached_tokens >= p.need and p.p2p_loads == 0:
        return f"{p.target} hit its own L1: the prompt was seen there before (rerun with a new --seed)"
    return ""


def pair_cause(verdict: judge.Judgement, about: set[str]) -> str:
    if verdict.top(about) is not None:
        return verdict.cause(about)
    return (verdict.cause(about) + "; look for P2P lookup/load timeouts in the target's server.log "
            "(`p2pctl diagnose 'zero cached tokens'`)")
