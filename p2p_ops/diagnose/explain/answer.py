"""explain's answer (pure): for each target instance, each chunk of the prompt with what a request would do there
(a local hit, a pull from a named peer, a recompute) as the one judge decides it (`judge.chunk`), the summary line,
the notes on what the node holds itself and what a run recorded, and which key inputs differ across servers.
"""

from __future__ import annotations

from p2p_ops.causes import Verdict, restart, verdict
from p2p_ops.diagnose.explain.model import HIT, PARTIAL, PULL, RECOMPUTE, Explanation, NodeExplanation
from p2p_ops.diagnose.judge.chunk import FIELDS, judge_chunks, key_inputs
from p2p_ops.diagnose.judge.views import ChunkVerdict, ExplainFacts, InstanceView
from p2p_ops.spec.agreement import split


def input_differences(views: list[InstanceView]) -> list[str]:
    """Fleet-wide: each key input on which the serving instances split, naming the odd one out and whether
    the difference reaches the keys."""
    serving = [v for v in views if v.serving]
    table = {v.instance: key_inputs(v) for v in serving}
    out = []
    for name in (*FIELDS, "PYTHONHASHSEED", "NONE_HASH", "hash_fallback"):
        values = {inst: vals[name] for inst, vals in table.items() if name in vals}
        if name == "hash_fallback":
            values = {inst: table[inst].get(name, "no") for inst in table}
        if len(set(values.values())) <= 1:
            continue
        line = f"{name}: {split(values).describe(name)}"
        if name == "PYTHONHASHSEED" and len({table[i].get('NONE_HASH') for i in values}) == 1:
            line += ("; harmless here: NONE_HASH is identical on every server (blake3 and LMCache's own "
                     "NONE_HASH do not use the seed), so the keys agree")
        out.append(line)
    return out


def explain_instance(facts: ExplainFacts, x: InstanceView) -> NodeExplanation:
    # A stopped server answers no /status and hashes nothing, yet that is the answer: its engine computes every
    # chunk, cut at its peers' chunk size.
    down = x.server_state != "running"
    cs = x.inputs.chunk_size if x.inputs else next((p.inputs.chunk_size for p in facts.instances if p.serving and
                                                     down), None)
    out = NodeExplanation(x.instance, x.node, cs, len(x.tokens or []))
    if not x.tokens:
        out.verdict = f"cannot explain: {x.tokenize_error or 'its engine did not tokenize the prompt'}"
        if x.engine_mute:      # no request reaches that engine: that, not a chunk, is why it misses
            out.causes = [verdict("engine_down", x.instance, ("explain:tokenize", x.tokenize_error),
                                  instance=x.instance, restart=restart((x.node, "engine")))]
        return out
    if cs is None or not down and (x.keys is None or x.keys.error):
        out.verdict = "cannot explain: " + (x.keys.error if x.keys and x.keys.error else
                                            f"{x.instance}'s server did not answer /status")
        return out
    hashes = x.hashes() or [""] * (len(x.tokens) // cs)
    out.chunks = [ChunkVerdict(i, i * cs, (i + 1) * cs, key) for i, key in enumerate(hashes)]
    judge_chunks(facts, x, out.chunks)
    if len(x.tokens) % cs or not hashes:
        start = len(hashes) * cs
        seen = f"tokens {start}-{len(x.tokens)} do not fill a chunk of {cs}"
        out.chunks.append(ChunkVerdict(len(hashes), start, len(x.tokens), action=PARTIAL, reason="partial",
                                       detail=f"{seen}: LMCache stores and looks up full chunks only",
                                       cause=verdict("partial", x.instance, ("explain", seen))))
    out.verdict, out.causes = _summary(out, cs)
    full = [c for c in out.chunks if c.action != PARTIAL]
    if full and all(c.action == HIT for c in full):
        head = f"{x.instance}'s own server holds every chunk now: this describes a request sent now. "
        out.notes.append(head + (f"Its own store put them there: {facts.sent[x.instance]} (the run folder's name says "
                                 "when) sent this very prompt to it; `--run` with that folder reads what that request "
                                 "met" if facts.sent.get(x.instance) else
                                 "If you are explaining a request that already ran here, its own store may have put "
                                 "them there; `--run` with that run's folder reads what it recorded"))
    out.notes += _recorded(facts, x)
    if x.tokens_by_source:
        out.notes.append("vLLM prompt tokens by source so far: " + ", ".join(
            f"{k}={v:g}" for k, v in sorted(x.tokens_by_source.items())) + " (local_cache_hit = vLLM's own prefix "
            "cache, which serves a repeat before LMCache is asked; external_kv_transfer = through LMCache)")
    return out


def _recorded(facts: ExplainFacts, x: InstanceView) -> list[str]:
    """What the run measured for this very request on this instance: on vLLM, which cache served it."""
    rec = facts.recorded
    if rec.get("instance") != x.instance:
        return []
    notes = [f"the run recorded for this request on {x.instance}: cached_tokens={rec.get('cached_tokens')} of "
             f"{rec.get('prompt_tokens')}"]
    src = rec.get("tokens_by_source") or {}
    if src:
        own, lm = src.get("local_cache_hit", 0.0), src.get("external_kv_transfer", 0.0)
        who = ("vLLM's own prefix cache served it, not LMCache" if own > 0 and lm == 0 else
               "LMCache served it (through vLLM's KV connector)" if lm > 0 and own == 0 else
               "both vLLM's own prefix cache and LMCache served parts" if own > 0 else "nothing was cached")
        notes.append(f"vLLM's prompt tokens by source for it: local_cache_hit={own:g} (vLLM's own prefix cache), "
                     f"external_kv_transfer={lm:g} (LMCache), local_compute={src.get('local_compute', 0.0):g}: {who}")
    return notes


def _summary(out: NodeExplanation, cs: int) -> tuple[str, list[Verdict]]:
    """The line, and the causes of its misses and risks: each chunk's, first miss first, each once."""
    full = [c for c in out.chunks if c.action != PARTIAL]
    if not full:
        head = f"nothing to cache: the prompt has {out.tokens} tokens, shorter than one chunk of {cs}"
        return head, [verdict("shorter_than_chunk", out.instance, ("explain", head))]
    served = [c for c in full if c.action in (HIT, PULL)]
    sources = sorted({c.source for c in served if c.action == PULL})
    parts = []
    if out.count(HIT):
        parts.append(f"{out.count(HIT)} local hit(s)")
    if sources:
        parts.append(f"{out.count(PULL)} pulled from {', '.join(sources)}")
    misses = [c for c in full if c.action == RECOMPUTE]
    at_risk = [c for c in served if c.reason]
    causes = list({(c.cause.id, c.cause.subject): c.cause for c in misses + at_risk if c.cause}.values())
    head = f"{len(served)}/{len(full)} full chunks served" + (f" ({'; '.join(parts)})" if parts else "")
    if misses:
        first = misses[0]
        head += f"; recompute from chunk {first.index}: {first.reason}: {first.detail}"
    elif at_risk:
        head += f"; at risk from chunk {at_risk[0].index}: {at_risk[0].detail}"
    return head, causes


def explain(facts: ExplainFacts) -> Explanation:
    out = Explanation(facts.fleet, facts.runtime, facts.prompt_label)
    out.differences = input_differences(facts.instances)
    for target in facts.targets:
        view = facts.view(target)
        if view is not None:
            out.nodes.append(explain_instance(facts, view))
    return out
