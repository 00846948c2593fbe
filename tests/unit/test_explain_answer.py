"""explain's judgement on hand-built facts: one test per miss reason (each a cause id of the catalogue, its verdict
on the chunk), plus the healthy pull and the strip."""

from __future__ import annotations

from p2p_ops.diagnose import judge
from p2p_ops.diagnose.doctor.model import FleetFacts
from p2p_ops.diagnose.explain.render import render_text
from p2p_ops.diagnose.explain.answer import explain
from p2p_ops.diagnose.findings import Report
from p2p_ops.diagnose.judge.views import ExplainFacts, InstanceView
from p2p_ops.endpoints.lmcache_api import Placement
from p2p_ops.facts.chunk_keys import ChunkKeys, KeyInputs

CS = 4
TOKENS = list(range(100, 110))          # 2 full chunks of 4 + a partial chunk of 2


def keys(prefix: str, n: int) -> ChunkKeys:
    return ChunkKeys(n, "b'nh'", False, [[{"chunk_hash_hex": f"{prefix}{i}", "model_name": "m", "kv_rank": 1}]
                                          for i in range(n)])


def view(name: str, prefix: str = "k", cs: int = CS, tokens=None, seed: str = "0", **kw) -> InstanceView:
    toks = list(TOKENS if tokens is None else tokens)
    v = InstanceView(name, name.rsplit("-", 1)[0], server_state="running", engine_state="running",
                     inputs=KeyInputs(cs, "blake3", "m", 1, "", seed), tokens=toks, keys=keys(prefix, len(toks) // cs),
                     p2p_state="registered", registered=True, logged_none_hash="b'nh'")
    for k, val in kw.items():
        setattr(v, k, val)
    return v


def fleet(*views: InstanceView, held: dict[str, list[str]] | None = None, targets=("node-b-0",), **kw) -> ExplainFacts:
    facts = ExplainFacts("f", "embedded", "p", list(views), list(targets), **kw)
    for key, holders in (held or {}).items():
        facts.placements[key] = [Placement(h, "l1") for h in holders]
    return facts


def connected(a: str = "node-a-0", b: str = "node-b-0", **kw) -> tuple[InstanceView, InstanceView]:
    return view(a, peers=[b], adapter_order=[b]), view(b, peers=[a], adapter_order=[a], **kw)


def test_a_healthy_pull_shows_every_chunk_pulled_from_the_node_that_holds_it():
    a, b = connected()
    ex = explain(fleet(a, b, held={"k0": ["node-a-0"], "k1": ["node-a-0"]}))
    n = ex.nodes[0]
    assert [c.describe() for c in n.chunks] == ["pull from node-a", "pull from node-a", "never cached (partial chunk)"]
    assert n.strip == "PP." and not ex.misses
    assert n.verdict.startswith("2/2 full chunks served (2 pulled from node-a)")


def test_a_chunk_the_node_holds_itself_is_a_local_hit():
    a, b = connected()
    ex = explain(fleet(a, b, held={"k0": ["node-b-0", "node-a-0"], "k1": ["node-a-0"]}))
    assert ex.nodes[0].strip == "HP."


def test_a_prompt_the_node_holds_itself_says_which_saved_request_stored_it_there():
    """Issue 28: explain after the request showed every chunk a local hit, the node's own fresh copy, and said
    nothing of it. A saved request that sent this very prompt to it is named (its run folder's name is when)."""
    a, b = connected()
    held = {"k0": ["node-b-0"], "k1": ["node-b-0"]}
    [note] = [n for n in explain(fleet(a, b, held=held)).nodes[0].notes if "own server holds every chunk" in n]
    assert "may have put them there" in note
    sent = explain(fleet(a, b, held=held, sent={"node-b-0": "20261202T152421Z-basic request b"})).nodes[0].notes
    assert any("Its own store put them there: 20261202T152421Z-basic request b" in n for n in sent), sent


def test_a_different_chunk_size_is_named_as_the_setting_that_makes_the_keys_differ():
    a = view("node-a-0", peers=["node-c-0"], adapter_order=["node-c-0"])
    c = view("node-c-0", prefix="c", cs=8, peers=["node-a-0"], adapter_order=["node-a-0"])
    ex = explain(fleet(a, c, held={"k0": ["node-a-0"], "k1": ["node-a-0"]}, targets=("node-c-0",)))
    chunk = ex.nodes[0].chunks[0]
    assert chunk.action == "recompute" and chunk.reason == "chunk_size_differs" == chunk.cause.id
    assert "chunk_size: node-c-0=8, node-a-0=4" in chunk.detail and chunk.cause.subject == "node-c-0"
    assert any(d.startswith("chunk_size:") for d in ex.differences)


def test_engines_that_tokenize_differently_are_named_with_the_first_differing_token():
    a, b = connected()
    b.tokens = [100, 101, 999, *TOKENS[3:]]
    b.keys = keys("b", 2)
    ex = explain(fleet(a, b, held={"k0": ["node-a-0"], "k1": ["node-a-0"]}))
    c = ex.nodes[0].chunks[0]
    assert c.reason == "tokens_differ" and "differ at token 2 (node-b-0=999, node-a-0=102)" in c.detail


def test_a_prompt_that_differs_in_its_first_token_is_named_from_the_near_match():
    a, b = connected()
    b.keys = keys("z", 2)
    b.tokens = [7, *TOKENS[1:]]
    a.tokens = list(b.tokens)
    a.keys = keys("z", 2)
    near = {"chunk": 0, "holder": "node-a-0", "positions": [0], "mine": [7], "theirs": [100], "key": "k0"}
    ex = explain(fleet(a, b, held={"k0": ["node-a-0"]}, near={"node-b-0": near}))
    c = ex.nodes[0].chunks[0]
    assert c.reason == "prompt_differs" and "position(s) [0]" in c.detail and "node-a-0" in c.detail
    later = ex.nodes[0].chunks[1]
    assert later.reason == "prefix_broken" and "chains on chunk 0's" in later.detail


def test_a_prompt_that_differs_in_a_middle_chunk_names_that_chunk_and_its_token_positions():
    """Issue 28: a saved prompt shares chunk 0 and differs at token 5; its chunk 1 is held. Chunk 1 is named,
    with the position, and not as evicted although the holder's eviction loop ran."""
    a, b = connected()
    a.eviction_runs = 3
    near = {"chunk": 1, "holder": "node-a-0", "positions": [5], "mine": [7], "theirs": [105], "key": "q1",
            "saved": "run-1 request 0"}
    ex = explain(fleet(a, b, held={"k0": ["node-a-0"], "q1": ["node-a-0"]}, near={"node-b-0": near}))
    chunks = ex.nodes[0].chunks
    assert chunks[0].action == "pull" and chunks[1].reason == "prompt_differs"
    assert "chunk 1 (after the same 1 chunk(s))" in chunks[1].detail and "position(s) [5]" in chunks[1].detail


def test_a_held_prefix_with_nothing_evicted_or_down_says_the_prompt_departs_at_the_first_missing_chunk():
    a, b = connected()
    b.tokens = list(range(100, 112))
    b.keys = keys("k", 3)
    ex = explain(fleet(a, b, held={"k0": ["node-a-0"]}))
    chunks = ex.nodes[0].chunks
    assert chunks[1].reason == "prompt_differs" and "hold(s) chunks 0-0 of this prompt" in chunks[1].detail
    assert "tokens 4-7" in chunks[1].detail and chunks[2].reason == "prefix_broken"
    a.eviction_runs = 1        # an eviction could have removed chunk 1: no longer confirmed
    assert explain(fleet(a, b, held={"k0": ["node-a-0"]})).nodes[0].chunks[1].reason == "not_confirmed"
    a.eviction_runs, a.server_state = 0, "dead"   # the holder of chunk 1 may have been a server now down
    b.peers = []
    assert explain(fleet(a, b, held={"k0": ["node-b-0"]})).nodes[0].chunks[1].reason == "server_down"


def test_a_holder_the_node_is_not_connected_to():
    a = view("node-a-0", peers=[])
    b = view("node-b-0", peers=[], p2p_state="registered")
    ex = explain(fleet(a, b, held={"k0": ["node-a-0"], "k1": ["node-a-0"]}))
    c = ex.nodes[0].chunks[0]
    assert c.reason == "peer_not_connected" and "not among node-b-0's P2P peers" in c.detail


def test_a_holder_killed_while_still_listed_is_named_dead_not_unconnected():
    """The diagnosis benchmark's holder_killed: SIGKILL leaves node-a listed as the chunks' holder until the
    coordinator drops it; explain said peer_not_connected about node-b, while every other verb named server_down."""
    a = view("node-a-0", peers=[], server_state="dead", inputs=None, keys=None)
    b = view("node-b-0", peers=[], p2p_state="registered")
    c = explain(fleet(a, b, held={"k0": ["node-a-0"], "k1": ["node-a-0"]})).nodes[0].chunks[0]
    assert c.reason == "server_down" and c.cause.subject == "node-a-0" and "node-a-0's server is dead" in c.detail


def test_a_stopped_peer_that_computed_the_prompt_is_named():
    a, b = connected()
    a.server_state, a.inputs, a.keys = "dead", None, None
    ex = explain(fleet(a, b, computed_on="node-a-0", run="r1"))
    c = ex.nodes[0].chunks[0]
    assert c.reason == "server_down" and "node-a-0 computed this prompt (run r1)" in c.detail and "dead" in c.detail
    assert c.cause.subject == "node-a-0" and "p2pctl down --node node-a --role server" in c.cause.fix


def test_a_stopped_server_without_a_run_record_is_named_as_stopped():
    a, b = connected()
    a.server_state, a.inputs, a.keys = "none", None, None
    c = explain(fleet(a, b)).nodes[0].chunks[0]
    assert c.reason == "server_down" and "node-a-0's server is stopped (no pid file)" in c.detail, c.detail


def test_evicted_chunks_name_the_holder_and_its_eviction_counter():
    a, b = connected()
    a.evicted_keys, a.eviction_runs, a.l1_used, a.l1_total = 1234, 9, 900 << 20, 1 << 30
    ex = explain(fleet(a, b, computed_on="node-a-0", run="r1"))
    c = ex.nodes[0].chunks[0]
    assert c.reason == "evicted" and "evicted 9 time(s)" in c.detail and "1234 L1 chunks deleted" in c.detail
    assert "88 % of 1.0 GiB" in c.detail


def test_deleted_temporary_copies_are_not_evictions():
    """A server deletes the copies of the pulls it served (LMCache counts them as l1_evicted too): without an
    eviction-loop pass that is no evidence of an eviction."""
    a, b = connected()
    b.evicted_keys = 16
    ex = explain(fleet(a, b))
    assert ex.nodes[0].chunks[0].reason == "cold"


def test_a_prompt_shorter_than_one_chunk():
    a, b = connected()
    b.tokens, b.keys = [1, 2, 3], keys("k", 0)
    ex = explain(fleet(a, b))
    n = ex.nodes[0]
    assert n.strip == "." and n.reasons == ["shorter_than_chunk"] and "shorter than one chunk of 4" in n.verdict


def test_lookups_that_time_out_turn_a_pull_into_a_miss():
    a, b = connected(lookup_timeouts=["P2P lookup task 3 timed out; treating as a miss"])
    ex = explain(fleet(a, b, held={"k0": ["node-a-0"], "k1": ["node-a-0"]}))
    c = ex.nodes[0].chunks[0]
    assert ex.nodes[0].strip == "xx." and c.reason == "lookup_timeout" and "task 3 timed out" in c.detail


def test_a_lookup_timeout_beside_completed_pulls_is_a_risk_not_a_miss():
    """Stop 37's CI: one lookup of node-b timed out on a busy box, yet its proof pulled every chunk from node-a;
    explain said 'recompute from chunk 0: lookup_timeout'. Completed pulls rule out lookups that always time out."""
    a, b = connected(lookup_timeouts=["P2P lookup task 5 timed out; treating as a miss"], p2p_loads=3.0)
    ex = explain(fleet(a, b, held={"k0": ["node-a-0"], "k1": ["node-a-0"]}))
    n = ex.nodes[0]
    assert n.strip == "PP." and not ex.misses
    assert n.chunks[0].reason == "lookup_timeout" and "3 of its pulls" in n.chunks[0].detail
    assert "at risk from chunk 0" in n.verdict and "task 5 timed out" in n.verdict


def test_a_degraded_engine_asks_nobody():
    a, b = connected(engine_degraded=True)
    ex = explain(fleet(a, b, held={"k0": ["node-a-0"]}))
    assert ex.nodes[0].chunks[0].reason == "engine_degraded"


# The doctor's findings in the diagnosis benchmark's chunk_size case (bench/results/diagnosis-2026-12-02,
# partial.json): node-c-0's env.sh set a chunk size of 512 and its server restarted; its engine refused it.
CHUNK_SIZE_FINDINGS = [
    ("error", "engine_degraded", "node-c-0/engine", "LMCache server tcp://127.0.0.1:5603 stopped answering",
     "node-c-0's engine is degraded: it serves without its lmcache server", "engine_degraded"),
    ("error", "agree:chunk_size", "node-c-0", "coordinator=256, node-a-0=256, node-b-0=256, node-c-0=512",
     "chunk_size differs across peers (read from /status). node-c-0 is the odd one out (coordinator, node-a-0, "
     "node-b-0 use 256).", "chunk_size_differs"),
]


def judged(findings) -> dict:
    """What gather hands the verdict: the one judge's finding about each instance's state."""
    report = Report("doctor", source="doctor")
    for f in findings:
        report.add(*f)
    found = judge.judgement(FleetFacts("f", "embedded", "http://c", "node-a"), report)
    return {i: why for i in ("node-a-0", "node-b-0", "node-c-0") if (why := found.why(i))}


def test_an_engine_degraded_by_its_servers_chunk_size_names_the_chunk_size():
    """Issue 28's benchmark: explain called node-c-0's miss engine_degraded while the doctor named the chunk size.
    The judge's cause of the state is explain's reason, so the two name one cause; with no cause known the state
    stands."""
    a, c = connected("node-a-0", "node-c-0", engine_degraded=True)
    c.inputs = KeyInputs(8, "blake3", "m", 1, "", "0")
    ex = explain(fleet(a, c, held={"k0": ["node-a-0"]}, targets=("node-c-0",), causes=judged(CHUNK_SIZE_FINDINGS)))
    chunk = ex.nodes[0].chunks[0]
    assert chunk.reason == "chunk_size_differs" and ex.nodes[0].reasons == ["chunk_size_differs"]
    assert chunk.cause.evidence[0].source == "doctor:agree:chunk_size"       # the judge's own verdict
    assert "node-c-0's engine is degraded" in chunk.detail and "chunk_size differs across peers" in chunk.detail
    assert explain(fleet(a, c, held={"k0": ["node-a-0"]}, targets=("node-c-0",))).nodes[0].reasons == [
        "engine_degraded"]


def test_a_stopped_holder_stays_server_down_when_the_judge_knows_only_that_it_stopped():
    """A process state is all the judge has about node-a-0 (its engine degraded is the consequence): explain's
    own reason stands, and a peer the judge knows a setting of names it."""
    a, b = connected()
    a.server_state, a.inputs, a.keys = "none", None, None
    causes = judged([("error", "process", "node-a-0/server", "none", "node-a-0's server is stopped while the fleet "
                      "runs", "server_down"), CHUNK_SIZE_FINDINGS[0]])
    assert causes == {}
    assert explain(fleet(a, b, causes=causes)).nodes[0].reasons == ["server_down"]
    causes = judged([("warn", "env_drift", "node-a-0", "LMCACHE_P2P_ADVERTISE_URL: env.sh 127.0.0.1:9, fleet.yaml "
                      "renders 127.0.0.1:5701", "node-a-0's env.sh no longer matches what fleet.yaml renders",
                      "env_drift")])
    c = explain(fleet(a, b, causes=causes)).nodes[0].chunks[0]
    assert c.reason == "env_drift" and "LMCACHE_P2P_ADVERTISE_URL" in c.detail and "no running server" in c.detail



def test_a_pull_from_a_peer_the_judge_finds_at_fault_stays_a_pull_and_names_the_risk():
    """Seen in bench/results/diagnosis-2026-12-02d's rerun: node-c advertised 127.0.0.1:9, node-a had it as a
    peer all the same (a loopback pull outlives the failed handshake), and explain said 8/8 served with no word of
    the fault the doctor reported. The pull stands; the judge's cause is its risk."""
    a, b = connected()
    causes = judged([("error", "reach", "node-b -> node-a-0 p2p (advertised)", "127.0.0.1:9", "node node-b cannot "
                      "open a TCP connection to node-a-0 p2p (advertised) at 127.0.0.1:9", "peer_unreachable")])
    assert "node-a-0" in causes
    n = explain(fleet(a, b, held={"k0": ["node-a-0"], "k1": ["node-a-0"]}, causes=causes)).nodes[0]
    assert n.strip == "PP." and [c.reason for c in n.chunks[:2]] == ["peer_unreachable", "peer_unreachable"]
    assert n.reasons == ["peer_unreachable"] and "at risk from chunk 0" in n.verdict and "127.0.0.1:9" in n.verdict
    assert n.chunks[0].describe() == "pull from node-a (at risk: peer_unreachable)"
    healthy = explain(fleet(a, b, held={"k0": ["node-a-0"], "k1": ["node-a-0"]})).nodes[0]
    assert healthy.reasons == [] and "at risk" not in healthy.verdict

def test_after_the_first_miss_held_chunks_are_recomputed_too():
    a, b = connected()
    ex = explain(fleet(a, b, held={"k1": ["node-a-0"]}))
    chunks = ex.nodes[0].chunks
    assert chunks[0].reason == "cold" and chunks[1].reason == "prefix_broken" and ex.nodes[0].strip == "xx."


def test_without_the_directory_the_holdings_are_unknown_not_cold():
    a, b = connected()
    ex = explain(fleet(a, b, directory_error="POST /directory/lookup answered 404"))
    assert ex.nodes[0].chunks[0].reason == "holdings_unknown"


def test_a_different_seed_under_blake3_is_named_and_called_harmless():
    a, b = connected()
    c = view("node-c-0", seed="7")
    ex = explain(fleet(a, b, c, held={"k0": ["node-a-0"], "k1": ["node-a-0"]}))
    line = next(d for d in ex.differences if d.startswith("PYTHONHASHSEED"))
    assert "node-c-0=7 (the odd one out; node-a-0, node-b-0 use PYTHONHASHSEED=0)" in line and "harmless" in line
    assert ex.nodes[0].strip == "PP."


def test_a_different_seed_that_changes_none_hash_is_a_key_difference():
    a = view("node-a-0", peers=["node-b-0"])
    b = view("node-b-0", prefix="b", seed="7", logged_none_hash="b'other'", peers=["node-a-0"])
    ex = explain(fleet(a, b, held={"k0": ["node-a-0"], "k1": ["node-a-0"]}))
    c = ex.nodes[0].chunks[0]
    assert c.reason == "hash_seed_differs" and "NONE_HASH" in c.detail
    assert "PYTHONHASHSEED: node-b-0=7, node-a-0=0" in c.detail


def test_text_shows_a_table_the_strip_and_the_legend():
    a, b = connected()
    ex = explain(fleet(a, b, held={"k0": ["node-a-0"], "k1": ["node-a-0"]}))
    ex.sources = ["holdings: the directory"]
    text = "\n".join(render_text(ex))
    assert "node-b-0 (node-b)  [PP.]" in text and "pull from node-a" in text and "strip: H local hit" in text
    assert "\n".join(render_text(ex, strip_only=True)).count("[PP.]") == 1
    assert ex.to_dict()["nodes"][0]["strip"] == "PP."


def test_on_vllm_a_recorded_request_says_whether_vllms_own_prefix_cache_or_lmcache_served_it():
    a, b = connected()
    rec = {"instance": "node-b-0", "cached_tokens": 2048, "prompt_tokens": 2196,
           "tokens_by_source": {"local_cache_hit": 2048.0, "external_kv_transfer": 0.0, "local_compute": 148.0}}
    ex = explain(fleet(a, b, held={"k0": ["node-a-0"], "k1": ["node-a-0"]}, recorded=rec))
    notes = " ".join(ex.nodes[0].notes)
    assert "local_cache_hit=2048" in notes and "vLLM's own prefix cache served it, not LMCache" in notes
    rec["tokens_by_source"] = {"external_kv_transfer": 2048.0, "local_compute": 148.0}
    assert "LMCache served it" in " ".join(explain(fleet(a, b, recorded=rec)).nodes[0].notes)


def test_evictions_without_a_record_tying_them_to_the_prompt_are_not_named_as_the_cause():
    """Issue 28: a prompt whose first sentence changed was explained as evicted, because the holder's eviction
    loop had run; a different first chunk misses the same way. Without a run record, no cause is confirmed."""
    a, b = connected()
    a.evicted_keys, a.eviction_runs, a.l1_used, a.l1_total = 1234, 9, 900 << 20, 1 << 30
    ex = explain(fleet(a, b))
    c = ex.nodes[0].chunks[0]
    assert c.reason == "not_confirmed", c
    assert "node-a-0: its eviction loop evicted 9 time(s)" in c.detail and "differs in its first chunk" in c.detail
    assert all(x.reason in ("not_confirmed", "prefix_broken") for x in ex.nodes[0].chunks if x.action == "recompute")


def test_a_node_that_holds_the_whole_prompt_says_the_answer_is_for_a_request_sent_now():
    a, b = connected()
    ex = explain(fleet(a, b, held={"k0": ["node-b-0"], "k1": ["node-b-0"]}))
    assert ex.nodes[0].strip == "HH." and "describes a request sent now" in " ".join(ex.nodes[0].notes)
    ex = explain(fleet(a, b, held={"k0": ["node-b-0"], "k1": ["node-a-0"]}))
    assert ex.nodes[0].strip == "HP." and "request sent now" not in " ".join(ex.nodes[0].notes)


def test_a_first_chunk_nobody_holds_is_cold_only_on_a_fleet_that_holds_nothing():
    """Issue 28's benchmark: a prompt with a changed first sentence, on a fleet holding the original, was called
    cold ('never computed here'). Without tokens to compare, that and a different first chunk look the same."""
    a, b = connected()
    assert explain(fleet(a, b)).nodes[0].chunks[0].reason == "cold"
    c = explain(fleet(a, b, held_keys=20)).nodes[0].chunks[0]
    assert c.reason == "not_confirmed" and "holds 20 chunk(s) of other prompts" in c.detail
    assert "differs in its first chunk" in c.detail


def test_a_node_whose_keys_no_peer_shares_names_what_sets_it_apart_even_where_nobody_holds_the_prompt():
    """Issue 28's hash_seed case: node-c-0 hashes with builtin under PYTHONHASHSEED 4242; LMCache's hasher cannot
    reproduce a builtin-hash peer's keys (its NONE_HASH is per process), so no held copy is found and explain
    said not_confirmed. Every serving peer keys chunks otherwise: that alone says no pull can hit. One peer with
    the same key inputs rules it out."""
    a, b = connected("node-a-0", "node-c-0", prefix="c", seed="4242", logged_none_hash="b'c'")
    b.inputs = KeyInputs(CS, "builtin", "m", 1, "", "4242")
    c = explain(fleet(a, b, targets=("node-c-0",), held_keys=16)).nodes[0].chunks[0]
    assert c.reason == "hash_algorithm_differs" and "hash_algorithm: node-c-0=builtin, node-a-0=blake3" in c.detail
    assert "PYTHONHASHSEED: node-c-0=4242, node-a-0=0" in c.detail
    twin = view("node-b-0", prefix="c", seed="4242", logged_none_hash="b'c'")
    twin.inputs = b.inputs
    assert explain(fleet(a, b, twin, targets=("node-c-0",), held_keys=16)).nodes[0].chunks[0].reason == "not_confirmed"


def test_a_pull_whose_restore_buffers_do_not_fit_the_targets_l1_is_l1_oom():
    """Issue 28's l1_too_small case: node-c-0's L1 is 2 MB (0.002 GB in its env.sh), a chunk of the bench's
    engine profile 512 KiB (256 tokens x 2048 bytes). Restore buffers must fit below the 80 % eviction
    watermark: the fourth chunk's do not, so the prefetch falls back from there (LMCache's l1_oom)."""
    a, c = connected("node-a-0", "node-c-0", l1_total=int(0.002 * 2**30), chunk_bytes=2**19)
    tokens = list(range(100, 100 + 5 * CS))
    a.tokens, c.tokens, a.keys, c.keys = tokens, tokens, keys("k", 5), keys("k", 5)
    n = explain(fleet(a, c, held={f"k{i}": ["node-a-0"] for i in range(5)}, targets=("node-c-0",))).nodes[0]
    assert n.strip == "PPPxx" and n.reasons == ["l1_oom"]
    assert "cannot hold the restore buffers of chunks 0-3 (2.0 MiB)" in n.chunks[3].detail
    assert "raise settings.l1_size_gb" in n.chunks[3].cause.fix
    c.l1_total = 2**30
    assert explain(fleet(a, c, held={f"k{i}": ["node-a-0"] for i in range(5)}, targets=("node-c-0",))).nodes[0].strip \
        == "PPPPP"


def test_a_target_whose_server_did_not_start_is_explained_not_refused():
    """Issue 28's transport case: node-c-0's server exited at start under UCX_TLS=rc (no RDMA device); explain
    answered 'cannot explain: no /status' and exited 2. Its engine computes every chunk (cut at the peers' chunk
    size), and the doctor's finding from that run says why."""
    a, c = connected("node-a-0", "node-c-0", server_state="dead", inputs=None, keys=None)
    ucx = ("error", "ucx_tls", "node-c-0", "UCX_TLS=rc", "UCX_TLS asks for RDMA transports but node node-c has no "
           "RDMA device", "tls_unavailable")
    n = explain(fleet(a, c, targets=("node-c-0",), causes=judged([ucx]))).nodes[0]
    assert n.strip == "xx." and n.reasons == ["tls_unavailable"] and n.chunk_size == CS
    assert "node-c-0's server is dead" in n.chunks[0].detail and "UCX_TLS asks for RDMA" in n.chunks[0].detail
    assert explain(fleet(a, c, targets=("node-c-0",))).nodes[0].reasons == ["server_down"]


def test_a_near_match_is_no_difference_while_a_server_that_may_have_held_the_prompt_is_down():
    """Issue 28's holder_stopped case: the holder's server stopped; a near-twin on a live server does not say the
    prompt differs, since what the stopped server held is not listed."""
    a, b = connected()
    c = view("node-c-0", server_state="none")
    a.keys = b.keys = keys("z", 2)
    a.tokens = b.tokens = [7, *TOKENS[1:]]
    near = {"chunk": 0, "holder": "node-a-0", "positions": [0], "mine": [7], "theirs": [100], "key": "k0"}
    ex = explain(fleet(a, b, c, held={"k0": ["node-a-0"]}, near={"node-b-0": near}))
    first = ex.nodes[0].chunks[0]
    assert first.reason == "server_down" and "node-c-0's server is stopped" in first.detail
    assert first.cause.subject == "node-c-0"


def test_each_reason_shows_the_catalogues_fix_and_scope_and_an_unconfirmed_one_only_a_next_step():
    """Issue 28: one fix per cause, from the one catalogue: explain's text and --json carry it; a reason that
    confirms nothing (cold) gives a next step, never a fix."""
    a, b = connected(engine_degraded=True)
    ex = explain(fleet(a, b, held={"k0": ["node-a-0"]}))
    text = "\n".join(render_text(ex))
    assert "why engine_degraded (from chunk 0)" in text
    assert "fix: fix the server it cannot use (the other causes about node-b-0 name why)" in text
    assert "(scope: instance)" in text
    [cause] = ex.to_dict()["nodes"][0]["causes"]
    assert cause["id"] == "engine_degraded" and cause["scope"] == "instance" and cause["subject"] == "node-b-0"
    assert cause["evidence"][0]["source"] == "explain" and "engine is degraded" in cause["evidence"][0]["seen"]
    assert ex.to_dict()["nodes"][0]["chunks"][0]["cause"] == cause
    a, b = connected()
    text = "\n".join(render_text(explain(fleet(a, b))))
    assert "next: send it once" in text and "(scope: request)" in text and "fix: " not in text


def test_an_engine_that_is_dead_or_answers_nothing_is_the_cause_not_a_refusal():
    """The diagnosis benchmark's engine_killed and engine_frozen cases: explain said 'cannot explain' with no cause and
    exited 2, while every other verb named engine_down. A request sent there fails; that is the answer. An engine
    that refused the prompt (an HTTP error) or whose state is unknown (its node did not answer) names nothing."""
    from p2p_ops.diagnose.explain import exit_code

    a = view("node-a-0")
    for mute, error in ((True, "node-b-0's engine is not running (dead)"),
                        (True, "POST /tokenize answered nothing: timed out"),
                        (False, "POST /tokenize answered 400: prompt too long")):
        b = view("node-b-0", tokens=[], tokenize_error=error, engine_mute=mute)
        ex = explain(fleet(a, b))
        n = ex.nodes[0]
        assert n.verdict == f"cannot explain: {error}"
        assert [c.id for c in n.causes] == (["engine_down"] if mute else []), n.causes
        assert exit_code(ex) == (1 if mute else 2)
        if mute:
            assert "p2pctl down" in n.causes[0].fix and "--node node-b" in n.causes[0].fix and error in str(
                n.causes[0].to_dict())
