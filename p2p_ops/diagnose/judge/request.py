"""The one cause of a failed proof pair (pure): `test basic` and `test matrix` send a prompt to one instance, then to
another that should pull it, and measure each request; both judge a pair that failed with `proof_cause`, from the
same evidence in the same order: what the requests themselves prove (a failed request, pulled KV bytes that the
engine's mismatch counter found out of place, a hit on the target's own L1, an answer that differs), then
explain's verdict on the first chunk the target did not get, then the fleet judge's cause about the pair.
"""

from __future__ import annotations

from typing import Callable, Collection, Optional

from p2p_ops.causes import Verdict, verdict
from p2p_ops.diagnose.judge.fleet import Judgement
from p2p_ops.endpoints.metrics_api import KV_MISMATCH


def own_l1_hit(p2p_loads: float, peer_hit_tokens: float, l1_hit_tokens: float) -> bool:
    """A target served from cache hit its own L1 only where its server's lookups say so: L1 hits, and neither a
    completed P2P load nor peer-served tokens (a pull whose load went uncounted still shows as the latter)."""
    return l1_hit_tokens > 0 and peer_hit_tokens == 0 and p2p_loads == 0


def request_cause(target: str, source: str, *, failed_on: str = "", error: str = "", cached_tokens: float = 0.0,
                  mismatch_tokens: float = 0.0, own_l1: bool = False, identical: bool = True) -> Optional[Verdict]:
    """The cause the requests prove (None when they prove nothing about why): `failed_on` the instance whose request
    failed with `error`; `mismatch_tokens` what the target engine's KV-mismatch counter rose by; `identical`: the
    target's answer equals the source's."""
    if failed_on:
        return verdict("request_failed", failed_on, (f"request to {failed_on}", error[:200] or "failed"),
                       instance=failed_on)
    if cached_tokens > 0 and mismatch_tokens:
        return verdict("kv_mismatch", target, (f"metric:{KV_MISMATCH} on {target}", f"rose by {mismatch_tokens:g} "
                                               "token(s) during the pull"))
    if cached_tokens > 0 and own_l1:
        return verdict("own_l1", target, (f"lookups of {target}'s server", "L1-hit tokens, neither a P2P load nor "
                                          "peer-served tokens: the prompt was seen there before"))
    if cached_tokens > 0 and not identical:
        return verdict("answer_differs", target, ("completions", f"{target} used cached KV from {source} but "
                                                  "answered differently"))
    return None


def proof_cause(requests: Optional[Verdict], explained: Optional[Verdict], fleet: Callable[[], Judgement],
                about: Collection[str]) -> tuple[Optional[Verdict], str]:
    """The cause of a failed pair and its words: what its requests prove (`request_cause`), else explain's verdict
    on the first chunk the target did not get where it confirms a cause, else the fleet judge's about the pair
    (`about`: its instances and nodes, read only when needed); (None, what was seen) when none is confirmed."""
    for v, how in ((requests, ""), (explained, "explain: ")):
        if v is not None and v.confirmed:
            return v, f"{how}{v.id}: {v.subject}: {'; '.join(e.seen for e in v.evidence)}; fix: {v.fix}"
    judged = fleet()
    return judged.cause(about), judged.said(about)
