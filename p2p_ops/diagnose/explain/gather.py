"""What `explain` reads (impure, read-only, bounded): for every instance its processes, its server's /status,
metrics, environment (PYTHONHASHSEED) and log (NONE_HASH, lookup timeouts), what its engine's /tokenize makes
of the prompt, and the chunk keys LMCache's own hasher computes on its node under its server's settings; then
where the coordinator's key directory places each key.

Nothing here changes the fleet. LMCache has routes that would tell more but act: `POST /cache/prefetches` (a
warm prefetch loads from L2 into L1) and the engine's lookup (it prefetches from peers and locks chunks on
them); explain uses neither, and says so in its sources.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Optional

from p2p_ops.diagnose.doctor.peers import context_meta
from p2p_ops.diagnose.explain.near import near_first_chunk, near_saved_prompt, near_stored, sent_by
from p2p_ops.diagnose.explain.prompt import PromptSpec
from p2p_ops.diagnose.judge import Judgement, judge
from p2p_ops.diagnose.judge.views import ExplainFacts, InstanceView
from p2p_ops.diagnose.signatures import SIGNATURES
from p2p_ops.endpoints import engine_api, kv_events_api, lmcache_api, metrics_api
from p2p_ops.errors import P2POpsError
from p2p_ops.facts.chunk_keys import ChunkKeys, KeyInputs, chunk_keys_fact
from p2p_ops.facts.envfile import process_env_fact
from p2p_ops.facts.logs import recent_grep_fact
from p2p_ops.facts.sections import read_node
from p2p_ops.facts.server_log import hash_fallback_fact, none_hash_fact
from p2p_ops.lifecycle import procs
from p2p_ops.lifecycle.context import FleetContext
from p2p_ops.lifecycle.render import bin_dir_for
from p2p_ops.lifecycle.status import misadvertised
from p2p_ops.spec.model import Instance, Node
from p2p_ops.spec.transfer_sizes import fleet_size_plan

TIMEOUTS = SIGNATURES["p2p_lookup_timeout"]
# How far back "recent" reaches in a server log (LMCache writes a few lines per request at INFO).
RECENT_LINES = 2000
NOT_USED = ("not used (they change the fleet): POST /cache/prefetches (loads L2 into L1) and the engine's "
            "lookup (prefetches from peers, read-locks chunks on them)")


def _states(ctx: FleetContext) -> dict[str, str]:
    states: dict[str, str] = {}
    for name, res in ctx.for_each_node(lambda n: procs.states(ctx.conn(n), ctx.procs(n))).items():
        node = next(n for n in ctx.fleet.nodes if n.name == name)
        for st in (res if not isinstance(res, Exception) else ctx.procs(node)):
            states[st.name] = "unreachable" if isinstance(res, Exception) else st.state
    return states


def _http(ctx: FleetContext, node: Node, inst: Instance, view: InstanceView, prompt: PromptSpec,
          by_mq: dict, salt: str) -> None:
    """The instance's HTTP reads: /status, server and engine metrics, /tokenize."""
    fleet, surl, eurl = ctx.fleet, ctx.server_url(node, inst), ctx.engine_url(node, inst)
    if view.server_state == "running":
        st = lmcache_api.server_status(surl)
        if st.reachable and st.chunk_size:
            metas = context_meta(st.raw)
            view.inputs = KeyInputs(int(st.chunk_size), st.hash_algorithm or fleet.settings.hash_algorithm,
                                    str(metas[0].get("model_name") or fleet.model) if metas else fleet.model,
                                    int(metas[0].get("world_size") or 1) if metas else 1, salt)
            view.p2p_state, view.peers, view.l1_used, view.l1_total = st.p2p_state, st.peers, st.l1_used, st.l1_total
            if fleet.runtime == "embedded":    # vLLM's KV size is its model's, which the spec does not describe
                view.chunk_bytes = fleet_size_plan(fleet, view.inputs.chunk_size, view.inputs.chunk_size).chunk_bytes
            view.adapter_order = [by_mq[(h, p)] for h, p, _ in lmcache_api.p2p_adapters(st.raw) if (h, p) in by_mq]
        # A server that does not answer /status (frozen, wedged) answers no scrape either: no second wait.
        samples = metrics_api.scrape(surl) if st.reachable else []
        view.evicted_keys = metrics_api.metric_sum(samples, metrics_api.L1_EVICTED)
        view.eviction_runs = metrics_api.metric_sum(samples, metrics_api.L1_EVICTION_RUNS)
        view.p2p_loads = metrics_api.metric_sum(samples, metrics_api.P2P_LOADS, l2_name="p2p")
    if view.engine_state != "running":
        view.tokenize_error = f"{inst.id}'s engine is not running ({view.engine_state})"
        # A dead engine is the cause; one not started (a stopped fleet) or unread (its node did not answer) is not.
        view.engine_mute = view.engine_state in ("dead", "stale")
        return
    view.tokens, view.tokenize_error = engine_api.tokenize(eurl, fleet.model, prompt.text, prompt.messages)
    view.engine_mute = view.tokens is None and view.tokenize_error.startswith(engine_api.ANSWERED_NOTHING)
    if fleet.runtime == "embedded":
        view.engine_degraded = engine_api.engine_lmcache_state(eurl) == "disconnected"
    else:
        view.tokens_by_source = engine_api.tokens_by_source(metrics_api.scrape(eurl))


def _node_reads(ctx: FleetContext, node: Node, views: dict[str, InstanceView]) -> None:
    """Per node, one round trip: the servers' seed, NONE_HASH and recent lookup timeouts."""
    batch = {}  # "<view field> <instance>" -> its fact
    for inst in node.instances:
        if views[inst.id].server_state == "running":
            pidfile, log = ctx.proc("server", inst).pidfile, ctx.proc("server", inst).log
            batch |= {f"env {inst.id}": process_env_fact(pidfile, ("PYTHONHASHSEED",)),
                      f"logged_none_hash {inst.id}": none_hash_fact(log),
                      f"hash_fallback {inst.id}": hash_fallback_fact(log),
                      f"lookup_timeouts {inst.id}": recent_grep_fact(log, [TIMEOUTS.pattern], RECENT_LINES, 20)}
    read = read_node(ctx.conn(node), batch, timeout=30)
    for label, fact in batch.items():
        field, iid = label.split(" ", 1)
        got, v = fact.parse(read[label].output), views[iid]
        if field == "lookup_timeouts":
            got = [ln for ln in got if TIMEOUTS.search(ln)]      # grep matched access lines too
        if field != "env":
            setattr(v, field, got)
        elif v.inputs is not None:
            v.inputs = KeyInputs(**{**v.inputs.__dict__, "python_hash_seed": got.get("PYTHONHASHSEED")})


# The coordinator's own token hasher (its chunk size and algorithm, from its process environment).
COORDINATOR_HASH_ENV = ("LMCACHE_MP_COORDINATOR_CHUNK_SIZE", "LMCACHE_MP_COORDINATOR_HASH_ALGORITHM")


def _coordinator_hasher(ctx: FleetContext) -> Optional[tuple[int, str, str]]:
    """(chunk size, algorithm, interpreter folder) the running coordinator hashes with; None: unknown."""
    cnode = ctx.fleet.coordinator_node()
    fact = process_env_fact(ctx.proc(ctx.unit("coordinator")).pidfile, COORDINATOR_HASH_ENV)
    try:
        env = fact.parse(read_node(ctx.conn(cnode), {"env": fact}, timeout=15)["env"].output)
        size, alg = env.get(COORDINATOR_HASH_ENV[0]), env.get(COORDINATOR_HASH_ENV[1])
        return (int(size), alg, bin_dir_for(cnode)) if size and size.isdecimal() and alg else None
    except Exception:  # noqa: BLE001 - without it, every node runs its own hasher
        return None


def _from_coordinator(ctx: FleetContext, inputs: KeyInputs, tokens: list[int]) -> Optional[ChunkKeys]:
    """The keys LMCache's running coordinator gives these tokens (`POST /directory/lookup` resolves every full
    chunk, held or not): LMCache's own hasher without starting an interpreter that imports lmcache."""
    entries = lmcache_api.directory_lookup_tokens(ctx.fleet.coordinator_url, inputs.model_name, tokens,
                                                  inputs.world_size, inputs.cache_salt)
    n = len(tokens) // inputs.chunk_size
    if not entries or not n or len(entries) % n:
        return None
    per = len(entries) // n
    return ChunkKeys(n, keys=[[e.key for e in entries[i * per:(i + 1) * per]] for i in range(n)])


def _keys(ctx: FleetContext, views: dict[str, InstanceView]) -> None:
    """LMCache's hasher, once per distinct (machine, interpreter, key inputs, tokens): the nodes of a local fleet
    share one machine, and importing lmcache costs seconds of CPU per run, so peers with the same settings and
    tokens share one computation. Where a server hashes exactly as the running coordinator does (same chunk
    size, blake3, which no seed changes, and the same lmcache install on the same machine), the coordinator
    computes the keys."""
    coordinator = _coordinator_hasher(ctx)
    cmachine = "local" if ctx.fleet.coordinator_node().connection == "local" else ctx.fleet.coordinator_node().address
    groups: dict[tuple, list[str]] = {}
    for node, inst in ctx.fleet.instances():
        v = views[inst.id]
        if v.inputs is None or not v.tokens or v.server_state != "running":
            continue
        machine = "local" if node.connection == "local" else node.address
        by_coordinator = (coordinator == (v.inputs.chunk_size, v.inputs.hash_algorithm, bin_dir_for(node))
                          and v.inputs.hash_algorithm == "blake3" and machine == cmachine and not v.hash_fallback)
        where = ("coordinator", "") if by_coordinator else (machine, bin_dir_for(node))
        groups.setdefault((*where, v.inputs, tuple(v.tokens)), []).append(inst.id)

    def one(key: tuple, members: list[str]) -> None:
        node = ctx.fleet.instance(members[0])[0]
        got = _from_coordinator(ctx, key[2], list(key[3])) if key[0] == "coordinator" else None
        who = "the running coordinator's hasher"
        if got is None:
            who = f"LMCache's hasher run on {node.name}"
            fact = chunk_keys_fact(f"{bin_dir_for(node)}/python", key[2], list(key[3]))
            try:
                got = fact.parse(read_node(ctx.conn(node), {"keys": fact}, timeout=120)["keys"].output)
            except Exception as exc:  # noqa: BLE001 - a node that cannot run the hasher is a fact, not a crash
                got = ChunkKeys(error=f"node {node.name}: {exc}")
        for iid in members:
            views[iid].keys, views[iid].keys_from = got, who

    with ThreadPoolExecutor(max_workers=max(1, min(8, len(groups)))) as pool:
        for f in [pool.submit(one, k, m) for k, m in groups.items()]:
            f.result()


def _placements(ctx: FleetContext, facts: ExplainFacts) -> None:
    wanted = {tuple(sorted(k.items())): k for v in facts.instances
              for ranks in (v.keys.keys if v.keys and not v.keys.error else []) for k in ranks}
    entries, facts.directory_error = lmcache_api.directory_lookup(ctx.fleet.coordinator_url, list(wanted.values()))
    for e in entries or []:
        facts.placements.setdefault(str(e.key.get("chunk_hash_hex")), []).extend(e.placements)


def gather(ctx: FleetContext, prompt: PromptSpec, targets: Optional[list[str]] = None, salt: str = "",
           progress: Callable[[str], None] = lambda _: None,
           judged: Optional[Callable[[], Judgement]] = None) -> ExplainFacts:
    """Read what explain needs; `judged`: the fleet judge's answer where the caller has it or will read it too
    (bundle, the tests' proofs: `judge.fleet.once`), so the fleet is not read twice."""
    fleet = ctx.fleet
    timings: dict[str, float] = {}
    marks = [time.monotonic()]

    def lap(name: str) -> None:  # seconds per phase: what `explain` says its time went to
        marks.append(time.monotonic())
        timings[name] = round(marks[-1] - marks[-2], 2)

    states = _states(ctx)
    lap("process states")
    by_mq = {(n.address, i.ports.mp): i.id for n, i in fleet.instances()}
    views = {i.id: InstanceView(i.id, n.name, states.get(ctx.proc("server", i).name, "none"),
                                states.get(ctx.proc("engine", i).name, "none")) for n, i in fleet.instances()}
    progress("reading /status, metrics and /tokenize of every instance")
    ctx.for_each_node(lambda n: [_http(ctx, n, i, views[i.id], prompt, by_mq, salt) for i in n.instances])
    lap("/status, metrics, /tokenize")
    for name, res in ctx.for_each_node(lambda n: _node_reads(ctx, n, views)).items():
        if isinstance(res, Exception):
            for inst in next(n for n in fleet.nodes if n.name == name).instances:
                views[inst.id].tokenize_error = views[inst.id].tokenize_error or f"node {name}: {res}"
    lap("server environment and logs")
    progress("computing chunk keys with LMCache's hasher (once per machine and distinct settings)")
    _keys(ctx, views)
    lap("LMCache's hasher")
    members = lmcache_api.coordinator_instances(fleet.coordinator_url)
    listed = {str(e.get("instance_id")) for e in members or []}
    for v in views.values():
        v.registered = v.instance in listed
    facts = ExplainFacts(fleet.name, fleet.runtime, prompt.label, list(views.values()),
                         targets or [i.id for _, i in fleet.instances()], computed_on=prompt.computed_on,
                         run=prompt.run, recorded=prompt.recorded)
    if misadvertised(fleet, members) or any(v.server_state != "running" or v.engine_degraded
                                            or v.p2p_state != "registered" or len(v.peers) < len(views) - 1
                                            for v in views.values()):
        # A state explain would blame (a server down, an engine degraded, a missing peer) has a cause the one
        # judge may know more specifically (a setting that differs, a transport the node lacks): read it once.
        # A peer listed under another URL than the spec's may still serve a pull, but at risk: the judge says why.
        progress("asking the one judge what put those instances in that state")
        try:
            found = judged() if judged else judge(ctx)
            facts.causes = {i: why for i in views if (why := found.why(i))}
        except P2POpsError:
            pass    # the judge could not read the fleet: explain's own states stand
        lap("the one judge")
    progress("looking the keys up in the coordinator's key directory")
    _placements(ctx, facts)
    _sources(ctx, facts)
    lap("key directory")
    stored: Optional[dict[str, list[list[int]]]] = None      # read at most once, for the first target that needs it
    for t in facts.targets:
        v = views.get(t)
        missing = [i for i, h in enumerate(v.hashes() if v and v.tokens else []) if not facts.placements.get(h)]
        if missing and not facts.directory_error:
            near = near_first_chunk(fleet.coordinator_url, v) if missing[0] == 0 else None
            node, inst = fleet.instance(t)
            if near is None and fleet.kv_events_on:
                stored = _stored(ctx, facts) if stored is None else stored
                near = near_stored(fleet.coordinator_url, fleet.model, v.tokens, v.inputs.chunk_size, stored)
            if near is None:
                near = near_saved_prompt(fleet.coordinator_url, fleet.model, ctx.engine_url(node, inst),
                                         ctx.layout.tests, v.tokens, v.inputs.chunk_size)
            if near and near["chunk"] == missing[0]:
                facts.near[t] = near
    lap("near-miss search")
    if prompt.text:
        facts.sent = {t: label for t in facts.targets if (label := sent_by(ctx.layout.tests, prompt.text, t))}
    facts.timings = timings
    return facts


def _stored(ctx: FleetContext, facts: ExplainFacts) -> dict[str, list[list[int]]]:
    """instance -> the prompts its engine stored (its KV-event replay); an engine whose replay could not be read is
    named in facts.events_error, with why."""
    stored = {}
    # Every node at once: an engine that does not answer costs one replay timeout, not one per engine.
    replies = ctx.for_each_node(lambda n: {i.id: kv_events_api.replay(ctx.fleet.kv_replay_url(n, i.id))
                                           for i in n.instances})
    for node in ctx.fleet.nodes:
        got = replies.get(node.name, {})
        if isinstance(got, Exception):
            got = {i.id: (None, f"node {node.name}: {got}") for i in node.instances}
        for inst_id, (payloads, why) in got.items():
            if payloads is None:
                facts.events_error[inst_id] = why
            else:
                stored[inst_id] = kv_events_api.stored_sequences(payloads)
    return stored


def _sources(ctx: FleetContext, facts: ExplainFacts) -> None:
    """Which servers report cache events to the directory, and what LMCache's own object listing says."""
    stats = lmcache_api.directory_stats(ctx.fleet.coordinator_url) or {}
    by_inst = stats.get("l1_keys_by_instance") or {}
    for v in facts.instances:
        facts.reporting[v.instance] = v.instance in by_inst
    facts.held_keys = sum(n for n in by_inst.values() if isinstance(n, int))
    for node, inst in ctx.fleet.instances():
        if facts.view(inst.id).server_state == "running":
            got = lmcache_api.cache_objects(ctx.server_url(node, inst), "l1")
            facts.listing[inst.id] = got.refused or f"{len(got.entries)} object(s)"
            break
