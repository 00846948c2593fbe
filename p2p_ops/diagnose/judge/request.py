"""What a proof's own requests show about why it failed (pure): `test basic` and `test matrix` send a prompt to
one instance, then to another that should pull it, and measure each request; these causes come from those
measurements, before any read of the fleet (`fleet.py`) is needed.
"""

from __future__ import annotations


def own_l1_hit(p2p_loads: float, peer_hit_tokens: float, l1_hit_tokens: float) -> bool:
    """A target served from cache hit its own L1 only where its server's lookups say so: L1 hits, and neither a
    completed P2P load nor peer-served tokens (a pull whose load went uncounted still shows as the latter)."""
    return l1_hit_tokens > 0 and peer_hit_tokens == 0 and p2p_loads == 0


def request_cause(target: str, source: str, *, failed_on: str = "", error: str = "", cached_tokens: float = 0.0,
                  mismatch_tokens: float = 0.0, own_l1: bool = False, identical: bool = True) -> str:
    """The cause the requests prove, with its catalogue id ("" when they prove nothing about why): `failed_on`
    the instance whose request failed with `error`; `identical`: the target's answer equals the source's."""
    if failed_on:
        return (f"request_failed: the request to {failed_on} failed ({error[:120]}): check its engine "
                "(`p2pctl status`, engine.log)")
    if cached_tokens > 0 and mismatch_tokens:
        return (f"kv_mismatch: {target} loaded {mismatch_tokens:g} token(s) whose KV bytes disagree: a corrupted or "
                "mis-laid transfer, or the peers' engine.profile differs")
    if cached_tokens > 0 and own_l1:
        return f"own_l1: {target} hit its own L1: the prompt was seen there before (rerun with a new --seed)"
    if cached_tokens > 0 and not identical:
        return (f"answer_differs: {target} used cached KV from {source} but answered differently: the engines "
                "disagree on the model (engine.model_seed, layers, profile) or the pulled KV bytes are wrong")
    return ""
