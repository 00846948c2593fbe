"""Why one chunk of a prompt would miss on one instance (pure): a local hit, a pull from a named peer, or a
recompute with the catalogue's reason and the evidence for it. explain gathers the evidence, whose types are
in `views.py` (`facts`: ExplainFacts; `x`: the target's InstanceView; `c`: a ChunkVerdict to fill), and shows the answer.

LMCache serves a prefix: the engine asks its server for the longest run of leading chunks it can get (its own
L1, then each P2P peer adapter in order), so after the first chunk it cannot get, every later chunk is
recomputed too ("prefix_broken"), whatever the fleet holds.

Miss reasons, most specific first: the target's server or engine cannot ask (server_down, engine_degraded,
not_registered); a connected peer holds it but lookups time out and no pull has ever completed (lookup_timeout;
timeouts beside completed pulls are intermittent, and the pull is shown at risk), or the target's L1 cannot
hold the restore buffers of the prefix up to it (l1_oom, the prefetch fallback's own name); only peers the target
is not connected to hold it (peer_not_connected); a peer holds the same tokens under other keys, or no serving
peer keys chunks as the target does (the key input that sets the target apart from its peers names the cause:
chunk_size_differs, hash_algorithm_differs, hash_seed_differs, ...), or holds what its own engine made of the
prompt (tokens_differ); the fleet holds a chunk whose tokens nearly match this one after the same parent, or
holds the chunks before this one while nothing could have removed this one (prompt_differs: every later chunk
misses too, as keys chain); the run that computed it says where, and that server stopped (server_down, about the
holder) or evicted (evicted); evictions ran but nothing ties this prompt to them, so eviction and a different first chunk
cannot be told apart (not_confirmed, naming both); nobody ever had it (cold). Each reason is a cause of the
catalogue (`p2p_ops.causes`), and its ruling-out evidence is checked here before it is named (a chunk a live server
holds is no eviction).

A state of the fleet (a server down, an engine degraded, a peer not connected) is a consequence where the fleet
judge (`fleet.py`, read by explain's gather into `facts.causes`) names what put those instances in it with more
specific evidence: the miss then takes the judge's cause, so explain and the doctor name one cause. A pull from a
peer the judge finds at fault stays a pull, with that cause as its risk.
"""

from __future__ import annotations

from itertools import zip_longest
from typing import Optional

from p2p_ops.causes import Verdict, restart, verdict
from p2p_ops.diagnose.findings import Finding
from p2p_ops.diagnose.judge.views import HIT, PULL, RECOMPUTE, ChunkVerdict, ExplainFacts, InstanceView
from p2p_ops.endpoints.metrics_api import L1_EVICTION_RUNS
from p2p_ops.spec.transfer_sizes import EVICTION_WATERMARK

# Why one differing chunk makes every later one miss (LMCache's chunk key hashes the parent key with the tokens).
CHAIN = "; each later chunk's key chains on this one's, so they miss even where their tokens match"

# procs' pid-file states as an operator reads them.
STATE_WORDS = {"none": "stopped (no pid file)", "dead": "dead (its pid file names a gone process)",
               "stale": "stale (its pid file names another process)"}

# Why two instances' chunk keys differ. A chunk key is LMCache's hash chain over the tokens, started from
# NONE_HASH, in chunks of the server's chunk size, tagged with the model name, the world size (kv_rank) and the
# cache salt. Any of these differing makes every key differ; PYTHONHASHSEED only through NONE_HASH (blake3 does
# not use it).
FIELDS = ("chunk_size", "hash_algorithm", "model_name", "world_size", "cache_salt")
# The cause each key input names when it sets an instance apart, in the order they are weighed: the settings, then
# what they feed (NONE_HASH; LMCache's fallback to Python's hash()).
KEY_CAUSES = {"chunk_size": "chunk_size_differs", "hash_algorithm": "hash_algorithm_differs",
              "model_name": "model_differs", "world_size": "world_size_differs", "cache_salt": "cache_salt_differs",
              "PYTHONHASHSEED": "hash_seed_differs", "NONE_HASH": "none_hash_differs", "hash_fallback": "builtin_hash"}
# A reason in words and as the catalogue's verdict.
Why = tuple[str, Verdict]


def key_inputs(v: InstanceView) -> dict[str, str]:
    """What this instance's keys depend on, by name (only what is known)."""
    if v.inputs is None:
        return {}
    out = {f: str(getattr(v.inputs, f)) for f in FIELDS}
    out["PYTHONHASHSEED"] = v.inputs.python_hash_seed if v.inputs.python_hash_seed is not None else "(unset)"
    nh = v.logged_none_hash or (v.keys.none_hash if v.keys else None)  # its server's log, else the hasher's
    if nh is not None:
        out["NONE_HASH"] = nh if len(nh) <= 24 else nh[:21] + "..."
    if v.hash_fallback:
        out["hash_fallback"] = f"builtin (could not load {v.hash_fallback} from vLLM)"
    return out


def differing_inputs(x: InstanceView, p: InstanceView) -> dict[str, str]:
    """{name: `name: x=value, p=value`} for each key input the two differ in (the seed only where NONE_HASH
    differs, since that is the only way it enters a key)."""
    a, b = key_inputs(x), key_inputs(p)
    out = {name: f"{name}: {x.instance}={a.get(name, '-')}, {p.instance}={b.get(name, '-')}"
           for name in (*FIELDS, "NONE_HASH", "PYTHONHASHSEED", "hash_fallback") if a.get(name) != b.get(name)
           and not (name == "PYTHONHASHSEED" and a.get("NONE_HASH") == b.get("NONE_HASH"))}
    if x.keys and x.keys.builtin_hash:
        out["builtin"] = (f"{x.instance}'s server hashes with Python's builtin hash(), whose NONE_HASH differs per "
                          "process: no other process can have its keys")
    return out


def key_cause(apart: list[dict[str, str]]) -> str:
    """The key input that sets an instance's keys apart (`apart`: its differences from each serving peer): the one
    it differs in from every peer (it is the odd one out), else the first it differs in from any."""
    common = set.intersection(*(set(d) for d in apart)) if apart else set()
    for names in (common, set(apart[0]) if apart else set()):
        if name := next((n for n in KEY_CAUSES if n in names), None):
            return name
    return "hash_fallback" if any("builtin" in d for d in apart) else "NONE_HASH"


def _keys_apart(facts: ExplainFacts, x: InstanceView, detail: str) -> Why:
    """Keys that differ, as the catalogue's cause of the key input that sets `x` apart, with the value its serving
    peers use (what it must be) and the restart of what reads it."""
    peers = [p for p in facts.instances if p.instance != x.instance and p.serving]
    name = key_cause([d for p in peers if (d := differing_inputs(x, p))])
    values = [key_inputs(p).get(name) for p in peers if key_inputs(p).get(name) != key_inputs(x).get(name)]
    role = "engine" if name in ("model_name", "world_size") else "server"
    return detail, verdict(KEY_CAUSES[name], x.instance, ("explain", detail), want=max(set(values), key=values.count)
                           if values else "one value", restart=restart((x.node, role)))


def first_difference(a: list[int], b: list[int], end: int) -> Optional[tuple[int, object, object]]:
    """(position, a's token, b's token) of the first difference within [0, end), or None."""
    pairs = zip_longest(a[:end], b[:end], fillvalue="(end)")
    return next(((i, ta, tb) for i, (ta, tb) in enumerate(pairs) if ta != tb), None)


def _label(facts: ExplainFacts, instance: str) -> str:
    """A peer's name as people say it: its node, when that node runs only this instance."""
    view = facts.view(instance)
    alone = view is not None and sum(v.node == view.node for v in facts.instances) == 1
    return view.node if view is not None and alone else instance


def _holders(facts: ExplainFacts, key: str, me: str) -> tuple[str, list[str]]:
    """(the tier the target holds the key in, or "", the other instances holding it)."""
    placed = facts.placements.get(key, [])
    return (next((p.tier for p in placed if p.instance_id == me and p.tier), ""),
            list(dict.fromkeys(p.instance_id for p in placed if p.instance_id != me)))


def _why(facts: ExplainFacts, cause: str, subject: str, detail: str) -> Why:
    view = facts.view(subject)
    node = view.node if view else subject
    return detail, verdict(cause, subject, ("explain", detail), instance=subject, node=node,
                           restart=restart((node, "server")))


def _judged(found: Finding, detail: str) -> Why:
    assert found.cause is not None     # the judge names a finding only with its cause
    return detail, found.cause


def _because(facts: ExplainFacts, about: list[str], cause: str, subject: str, detail: str) -> Why:
    """A state explain saw (a server down, an engine degraded, a peer not connected) is what the miss follows
    from; where the one judge names what put those instances in it (a setting that differs, a transport the node
    lacks), that is the cause, and the state its consequence."""
    found = list({id(f): f for f in (facts.causes[a] for a in about if a in facts.causes)}.values())
    if not found:
        return _why(facts, cause, subject, detail)
    return _judged(found[0], f"{detail}. Why (the one judge): " + "; ".join(
        f"{f.subject}: {f.message} (seen: {f.value})" for f in found))


def _cannot_ask(facts: ExplainFacts, x: InstanceView) -> Optional[Why]:
    if x.server_state != "running":
        return _because(facts, [x.instance], "server_down", x.instance,
                        f"{x.instance}'s server is {x.server_state}: its engine computes everything itself")
    if x.engine_degraded:
        return _because(facts, [x.instance], "engine_degraded", x.instance, f"{x.instance}'s engine is degraded "
                        "(not linked to its lmcache server): it asks no cache and computes every chunk")
    return None


def _not_connected(facts: ExplainFacts, x: InstanceView, holders: list[str]) -> str:
    why = []
    for h in holders:
        v = facts.view(h)
        state = v.server_state if v else "not in this fleet"
        if v is None or state != "running":
            why.append(f"{h}'s server is {state}")
        elif h not in x.peers:
            why.append(f"{h} is not among {x.instance}'s P2P peers {x.peers} (p2p_state {x.p2p_state})")
    return f"held by {', '.join(holders)}, but " + "; ".join(why or ["no connected peer holds it"])


def _peer_copy(facts: ExplainFacts, x: InstanceView, end: int) -> Optional[tuple[str, str, str]]:
    """A serving peer that holds this token range under its own keys: (tokens_differ, or "keys" where its keys
    differ, the peer, the detail)."""
    for p in facts.instances:
        if p.instance == x.instance or not (p.serving and p.inputs and p.tokens and p.keys) or p.keys.error:
            continue
        cs = p.inputs.chunk_size
        covering = (end + cs - 1) // cs
        if covering > len(p.hashes()) or not all(facts.placements.get(h) for h in p.hashes()[:covering]):
            continue
        diff = first_difference(x.tokens or [], p.tokens, min(end, covering * cs))
        if diff is not None:
            return "tokens_differ", p.instance, (
                f"{p.instance} holds this range as its own engine tokenizes the prompt, and the two engines "
                f"differ at token {diff[0]} ({x.instance}={diff[1]}, {p.instance}={diff[2]}): a tokenizer or "
                "chat-template difference")
        settings = list(differing_inputs(x, p).values()) or ["the hash chain (NONE_HASH)"]
        return "keys", p.instance, f"{p.instance} holds the same tokens under other keys: {'; '.join(settings)}"
    return None


def _evictions(v: InstanceView) -> str:
    return (f"its eviction loop evicted {v.eviction_runs:g} time(s) since it started ({L1_EVICTION_RUNS}), "
            f"{v.evicted_keys:g} L1 chunks deleted (L1 {_l1(v)})")


def _gone(facts: ExplainFacts, x: InstanceView, c: ChunkVerdict) -> Why:
    """Nobody holds it and no peer has it under other keys: where did it go, if it ever was anywhere?"""
    near = facts.near.get(x.instance)
    # A held near-twin after the same parent shows that a prompt differing there was computed; that this one was
    # not is what an eviction would leave unseen too, but a stored sibling with no copy of this chunk beside it
    # speaks for the difference (issue 28). A server down rules it out: what it held is not listed.
    if near and near.get("chunk", 0) == c.index and not _down(facts) and not _mute(facts):
        saved = f" ({near['saved']})" if near.get("saved") else ""
        where = "first chunk" if c.index == 0 else f"chunk {c.index} (after the same {c.index} chunk(s))"
        return _why(facts, "prompt_differs", x.instance, (
            f"{near['holder']} holds a chunk{saved} whose tokens equal this prompt's {where} except at token "
            f"position(s) {near['positions']} (prompt {near['mine']} vs held {near['theirs']}): the prompt differs "
            + (f"from token {near['token']} on " if near.get("token") is not None else "there ")
            + f"from what was computed{CHAIN}"))
    departs = _departs(facts, x, c)
    if departs:
        return departs
    w = facts.view(facts.computed_on) if facts.computed_on else None
    if w is not None and w.server_state != "running":
        return _because(facts, [w.instance], "server_down", w.instance, f"{w.instance} computed this prompt (run "
                        f"{facts.run}), but its server is {w.server_state}: what it held went with it")
    if w is not None:
        if w.eviction_runs > 0:
            return _why(facts, "evicted", w.instance, f"{w.instance} computed this prompt (run {facts.run}) and no "
                        f"longer lists it: {_evictions(w)}")
        return _why(facts, "not_held", w.instance, f"{w.instance} computed this prompt (run {facts.run}) but no "
                    "server lists it now (no eviction ran there: its server restarted, or the cache was cleared)")
    down = _down(facts)
    if down:
        return _because(facts, [v.instance for v in down], "server_down", down[0].instance, "no running server "
                        "holds it; " + "; ".join(f"{v.instance}'s server is "
                                                 f"{STATE_WORDS.get(v.server_state, v.server_state)}" for v in down)
                        + ": what it held is gone")
    mute = _mute(facts)
    if mute:    # frozen or wedged (LMCache #4676): the coordinator drops its keys once its heartbeats stop
        return _because(facts, [v.instance for v in mute], "server_unresponsive", mute[0].instance,
                        "no server that answers holds it; " + "; ".join(f"{v.instance}'s server runs but does not "
                                                                       "answer /status" for v in mute)
                        + ": what it holds is out of every peer's reach")
    evicting = [v for v in facts.instances if v.eviction_runs > 0]
    if evicting:
        # Evictions ran, but nothing ties this prompt to them: a prompt whose first chunk differs from the one a
        # server holds misses the same way (keys chain, so every later chunk misses too, even where its tokens
        # match). Naming either would be a guess.
        return _why(facts, "not_confirmed", x.instance, (
            "no server holds it, and the evidence does not say why: either it was evicted ("
            + "; ".join(f"{v.instance}: {_evictions(v)}" for v in evicting) + "), or this prompt differs "
            + (f"in chunk {held} (the {held} chunk(s) before it are held) " if (held := _held_prefix(facts, x))
               else "in its first chunk ") + "from the one that was computed (every chained key then differs, even where later "
            "tokens match). Explain the original prompt (or `--run` of the run that sent it): a server that "
            "still holds it rules out eviction"))
    if c.index == 0 and facts.held_keys:
        # The fleet holds other prompts' chunks: a prompt whose first chunk differs from one of them (a changed
        # first sentence) misses exactly like one never sent. Without its tokens nothing tells the two apart.
        return _why(facts, "not_confirmed", x.instance, (
            f"no server holds this prompt's first chunk, while the fleet holds {facts.held_keys} chunk(s) of other "
            "prompts: either it was never computed here, or it differs in its first chunk from one that was (every "
            "later key chains on it, so everything misses even where tokens match). No held chunk's tokens nearly "
            "match (the key directory keeps tokens only on LMCache's lmcache-driven path, vLLM on GPU); a prompt "
            "sent by `p2pctl test basic --prompt-file` is saved, and explain then compares against it"))
    return _why(facts, "cold", x.instance, "no server holds it: this prompt was never computed on this fleet (or not "
                "since a restart)")


def _down(facts: ExplainFacts) -> list[InstanceView]:
    return [v for v in facts.instances if v.server_state != "running"]


def _held_prefix(facts: ExplainFacts, x: InstanceView) -> int:
    """How many of the prompt's chunks, from the first, some server holds: where a different prompt would part."""
    hashes = x.hashes()
    return next((i for i, h in enumerate(hashes) if not facts.placements.get(h)), len(hashes))


def _mute(facts: ExplainFacts) -> list[InstanceView]:
    """Servers whose process runs but which could not be read (their /status did not answer)."""
    return [v for v in facts.instances if v.server_state == "running" and v.inputs is None]


def _departs(facts: ExplainFacts, x: InstanceView, c: ChunkVerdict) -> Optional[Why]:
    """A running server holds the chunk before this one, and nothing could have removed this one (no eviction ran
    anywhere, no server is down): the computed prompt never continued with these tokens."""
    if c.index == 0:
        return None
    before = [p.instance_id for p in facts.placements.get(x.hashes()[c.index - 1], [])
              if (view := facts.view(p.instance_id)) is not None and view.server_state == "running"]
    if not before or _down(facts) or _mute(facts) or any(v.eviction_runs > 0 for v in facts.instances):
        return None
    return _why(facts, "prompt_differs", x.instance, (
        f"{', '.join(sorted(set(before)))} hold(s) chunks 0-{c.index - 1} of this prompt but no server holds chunk "
        f"{c.index} (tokens {c.start}-{c.end - 1}), no eviction ran on any server and none is down: what was "
        f"computed departs from this prompt at chunk {c.index} (or ended before it){CHAIN}"))


def _l1(v: InstanceView) -> str:
    if not v.l1_total:
        return "usage unknown"
    return f"{100 * v.l1_used / v.l1_total:.0f} % of {v.l1_total / 2**30:.1f} GiB"


def _set(c: ChunkVerdict, why: Why) -> None:
    c.detail, c.cause = why
    c.reason = c.cause.id


def _chunk(facts: ExplainFacts, x: InstanceView, c: ChunkVerdict) -> Optional[Why]:
    """One chunk's action as if nothing before it had missed, and why it misses (or is at risk)."""
    c.here, c.holders = _holders(facts, c.key, x.instance)
    blocked = _cannot_ask(facts, x)
    if blocked:
        return blocked
    if c.here:
        c.action = HIT
        return None
    if facts.directory_error:
        return _why(facts, "holdings_unknown", x.instance, f"where chunks live is unknown: {facts.directory_error}")
    connected = [h for h in x.adapter_order + sorted(x.peers) if h in c.holders and h in x.peers
                 and ((view := facts.view(h)) is not None and view.server_state == "running")]
    if connected:
        timeouts = (f"{len(x.lookup_timeouts)} recent timed-out lookup(s) in its server.log, last: "
                    f"{x.lookup_timeouts[-1][:160]}") if x.lookup_timeouts else ""
        if timeouts and not x.p2p_loads:
            return _why(facts, "lookup_timeout", x.instance, (
                f"{connected[0]} holds it, but {x.instance}'s lookups time out ({timeouts}) and none of its pulls "
                "from a peer has completed since its server started: a timed-out lookup counts as a miss"))
        if x.chunk_bytes and x.l1_total and (c.index + 1) * x.chunk_bytes > EVICTION_WATERMARK * x.l1_total:
            return _why(facts, "l1_oom", x.instance, (
                f"{connected[0]} holds it, but {x.instance}'s L1 ({_l1(x)}) cannot hold the restore buffers of "
                f"chunks 0-{c.index} ({(c.index + 1) * x.chunk_bytes / 2**20:.1f} MiB) below the "
                f"{EVICTION_WATERMARK:.0%} eviction watermark, so its prefetch falls back to recompute"))
        c.action, c.source, risk = PULL, _label(facts, connected[0]), None
        if timeouts:
            # Its pulls also complete, so the timeouts are intermittent (a busy peer, a slow poll): a request whose
            # lookup times out is recomputed, one whose lookup answers is served. A risk, not a confirmed miss.
            risk = _why(facts, "lookup_timeout", x.instance, (
                f"{x.instance}'s lookups time out at times ({timeouts}), while {x.p2p_loads:g} of its pulls from "
                "a peer completed since its server started: a request whose lookup times out is recomputed"))
        if connected[0] in facts.causes:
            # It may well be served (a loopback pull can outlive a failed handshake), but the source is at fault.
            f = facts.causes[connected[0]]
            risk = _judged(f, f"{connected[0]} would serve it, but the one judge finds it at fault: {f.subject}: "
                              f"{f.message} (seen: {f.value})")
        return risk
    if c.holders:
        # A holder that died without deregistering (SIGKILL, a crash) stays listed until the coordinator drops it:
        # its death, not the connection, is why no peer serves the chunk.
        gone = [h for h in c.holders if (v := facts.view(h)) is not None and v.server_state != "running"]
        cause, about = ("server_down", gone[0]) if gone and len(gone) == len(c.holders) else (
            "peer_not_connected", x.instance)
        return _because(facts, c.holders, cause, about, _not_connected(facts, x, c.holders))
    if x.p2p_state != "registered" and x.p2p_state != "unknown":
        return _because(facts, [x.instance], "not_registered", x.instance,
                        f"{x.instance} is {x.p2p_state}: it asks no peer")
    copy = _peer_copy(facts, x, c.end)
    if copy:
        return _keys_apart(facts, x, copy[2]) if copy[0] == "keys" else _why(facts, copy[0], x.instance, copy[2])
    apart = {p.instance: differing_inputs(x, p) for p in facts.instances if p.instance != x.instance and p.serving}
    if apart and all(apart.values()):
        # No serving peer keys chunks as this instance does: none can hold its keys, whether or not the prompt was
        # ever computed (a peer with the same key inputs would rule this out).
        return _keys_apart(facts, x, f"no serving peer keys chunks as {x.instance} does, so none can hold its keys: "
                           + "; ".join(dict.fromkeys(d for ds in apart.values() for d in ds.values())))
    return _gone(facts, x, c)


def judge_chunks(facts: ExplainFacts, x: InstanceView, chunks: list[ChunkVerdict]) -> None:
    """Fill each full chunk's verdict in prompt order: what it would do alone, then the prefix rule (after the first
    chunk not served, every later one is recomputed, and after a prompt that differs, every later key differs)."""
    broken: Optional[int] = None
    for c in chunks:
        if why := _chunk(facts, x, c):
            _set(c, why)
        if broken is not None and (c.action in (HIT, PULL) or chunks[broken].reason == "prompt_differs"):
            c.action = RECOMPUTE
            _set(c, _why(facts, "prefix_broken", x.instance,
                         f"its key chains on chunk {broken}'s, which differs from what the fleet computed"
                         if chunks[broken].reason == "prompt_differs" else
                         f"LMCache serves only a prefix, and chunk {broken} is not served"))
        if c.action == RECOMPUTE and broken is None:
            broken = c.index
