"""The cross-node proof: a prefix computed on node A is served to node B from A's cache, with identical output.

1. A long prompt (>= `chunks` full chunks) goes to engine A, whose cache has never seen it: computed cold.
2. The same prompt goes to engine B, which has never seen it either: its server must find the chunks on A
   and pull them (P2P, NIXL). B reports cached tokens, B's server counts loads from its `p2p` adapter.
3. A's and B's outputs must be identical: the embedded engine's answer depends on every KV byte.
4. A fresh control prompt on B must be computed cold (cached tokens 0): the cache is not inventing hits.

Both prompts are checked against the coordinator's key directory before they are sent: one that a server
already holds a chunk of is replaced by the next document, so neither can collide with a prefix the fleet
holds. The run folder keeps the evidence to replay and explain it: prompts.jsonl (each request's prompt, where
it went, who computed it first), requests.csv, /status and metrics snapshots before and after, and, when B
was not served from cache, `p2pctl explain`'s verdict for B (explain.json, explain.txt). A failed proof names its
cause with `judge.request.proof_cause`, from the same evidence `test matrix` reads for a pair.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Optional

from p2p_ops import files
from p2p_ops.causes import Verdict
from p2p_ops.diagnose import explain
from p2p_ops.diagnose.judge import request
from p2p_ops.diagnose.judge.fleet import Judgement, once
from p2p_ops.diagnose.explain.prompt import PROMPTS_FILE
from p2p_ops.endpoints import engine_api, lmcache_api, metrics_api
from p2p_ops.endpoints.metrics_api import (ENGINE_LOADED_BYTES, KV_MISMATCH, L1_HIT_TOKENS, L1_USED, PEER_HIT_TOKENS,
                                           TOKENS_BY_SOURCE)
from p2p_ops.errors import BadInput
from p2p_ops.harness import prompts
from p2p_ops.harness.openai_client import complete
from p2p_ops.harness.rundir import new_run_dir
from p2p_ops.lifecycle.context import FleetContext
from p2p_ops.observe.records import RequestRecord, write_csv
from p2p_ops.observe.report import Check, check_table, figure_table

L1_OBJECTS_WAIT_S = 15.0


@dataclass
class BasicResult:
    passed: bool
    a: str
    b: str
    chunk_size: int
    chunks: int
    checks: list[Check]
    numbers: dict
    requests: dict
    likely_cause: str = ""                          # the cause in words (`cause`: its verdict)
    run_dir: str = ""
    notes: list[str] = field(default_factory=list)
    explain: dict = field(default_factory=dict)     # explain's verdict for B when B was not served from cache
    cause: Optional[Verdict] = None

    def to_dict(self) -> dict:
        return asdict(self) | {"cause": self.cause.to_dict() if self.cause else None}


def pick_pair(ctx: FleetContext, a: Optional[str], b: Optional[str]):
    """A and B default to the first instances of two different nodes."""
    insts = ctx.fleet.instances()
    if len(insts) < 2:
        raise BadInput("the cross-node proof needs at least two instances in the fleet")
    na, ia = ctx.fleet.instance(a) if a else insts[0]
    if b:
        nb, ib = ctx.fleet.instance(b)
    else:
        others = [(n, i) for n, i in insts if n.name != na.name] or [(n, i) for n, i in insts if i.id != ia.id]
        nb, ib = others[0]
    if ia.id == ib.id:
        raise BadInput(f"--a and --b are both {ia.id}; name two different instances")
    return (na, ia), (nb, ib)


def l1_objects(server_url: str) -> int:
    return lmcache_api.resident_objects(lmcache_api.server_status(server_url).raw)


def wait_l1_objects(server_url: str, wanted: int, until: float) -> bool:
    """The engine stores its chunks as part of the request, and the server admits them after: a peer asked before
    they are resident would miss. False: fewer than `wanted` were resident at `until`."""
    while (held := l1_objects(server_url)) < wanted and time.monotonic() < until:
        time.sleep(0.1)
    return held >= wanted


def grew(before: list, after: list, name: str, **labels: str) -> float:
    return metrics_api.metric_sum(after, name, **labels) - metrics_api.metric_sum(before, name, **labels)


def snapshot(ctx: FleetContext) -> dict:
    """/status of every server and the metrics of every server and engine, for before/after evidence."""
    def metrics(url: str, prefixes: tuple[str, ...]) -> dict:
        return {f"{n}{json.dumps(lab, sort_keys=True) if lab else ''}": v for n, lab, v in metrics_api.scrape(url)
                if n.startswith(prefixes)}

    out = {}
    for node, inst in ctx.fleet.instances():
        st = lmcache_api.server_status(ctx.server_url(node, inst))
        out[inst.id] = {"status": st.raw if st.reachable else None,
                        "server_metrics": metrics(ctx.server_url(node, inst), ("lmcache_mp_",)),
                        "engine_metrics": metrics(ctx.engine_url(node, inst), ("vllm:", "p2p_engine_"))}
    return out


def write_prompts(out_dir: Path, rows: list[dict]) -> None:
    """prompts.jsonl: what `p2pctl explain --run` and a replay read."""
    files.write_text(out_dir / PROMPTS_FILE, "".join(json.dumps(r) + "\n" for r in rows))


def explain_request(ctx: FleetContext, out_dir: Path, request, prompt: str, computed_on: str,
                    instance: str, judged: Optional[Callable[[], Judgement]] = None
                    ) -> tuple[dict, Optional[explain.Explanation]]:
    """explain's verdict on `instance` for a request of this run that was not served from cache."""
    spec = explain.PromptSpec(f"request {request} of {out_dir.name}", text=prompt, computed_on=computed_on,
                              run=str(out_dir))
    try:
        ex = explain.run(ctx, spec, [instance], judged=judged)
    except Exception as exc:  # noqa: BLE001 - the run's own verdict must survive a failing explanation
        return {"error": f"{type(exc).__name__}: {exc}"}, None
    n = ex.nodes[0] if ex.nodes else None
    return {"instance": instance, "strip": n.strip if n else "", "verdict": n.verdict if n else "",
            "reasons": n.reasons if n else [], "causes": [v.to_dict() for v in n.causes] if n else []}, ex


def _fresh_prompt(ctx: FleetContext, url: str, seed: int, index: int, target: int,
                  notes: list[str], prompt_text: Optional[str] = None) -> tuple[str, int]:
    """A prompt of >= target tokens none of whose chunks the directory places anywhere (the next documents are
    tried when one is held); `prompt_text` is used as it is (a replay)."""
    model = ctx.fleet.model
    if prompt_text is not None:
        return prompt_text, prompts.count_tokens(url, model, prompt_text)
    for k in range(8):
        text, n = prompts.sized_document(url, model, seed, index + 2 * k, target)
        tokens, _ = engine_api.tokenize(url, model, text)
        held = lmcache_api.directory_held_chunks(ctx.fleet.coordinator_url, model, tokens) if tokens else None
        if not held:
            if held is None:
                notes.append("the coordinator's key directory did not answer: prompts were not checked for "
                             "prefixes the fleet already holds")
            return text, n
        notes.append(f"document {index + 2 * k} of seed {seed}: the fleet already holds {held} chunk(s) of it; "
                     "took the next one")
    raise RuntimeError(f"every candidate prompt of seed {seed} is already held by the fleet; pass another --seed")


def run_basic(ctx: FleetContext, a: Optional[str] = None, b: Optional[str] = None, chunks: int = 8,
              max_tokens: int = 24, seed: Optional[int] = None, progress: Callable[[str], None] = lambda _: None,
              out_dir: Optional[Path] = None, prompt_text: Optional[str] = None) -> BasicResult:
    if chunks < 2:
        raise BadInput(f"--chunks {chunks}: use at least 2 so that a prefix spans several chunks")
    (na, ia), (nb, ib) = pick_pair(ctx, a, b)
    model = ctx.fleet.model
    a_url, b_url = ctx.engine_url(na, ia), ctx.engine_url(nb, ib)
    a_srv, b_srv = ctx.server_url(na, ia), ctx.server_url(nb, ib)
    seed = int(time.time() * 1000) % 10**9 if seed is None else seed
    chunk = lmcache_api.server_status(a_srv).chunk_size or ctx.fleet.settings.chunk_size
    target = chunks * chunk + chunk // 2

    out_dir = out_dir or new_run_dir(ctx.layout, "basic")
    files.make_dirs(out_dir)
    progress(f"building a {target}-token prompt ({chunks} chunks of {chunk}) and a control prompt the fleet "
             "does not hold")
    notes: list[str] = []
    prompt, n_prompt = _fresh_prompt(ctx, a_url, seed, 0, target, notes, prompt_text)
    control, _ = _fresh_prompt(ctx, b_url, seed, 1, target, notes)

    files.write_json(out_dir / "status_before.json", snapshot(ctx))
    before = {"a": metrics_api.scrape(a_srv), "b": metrics_api.scrape(b_srv), "b_engine": metrics_api.scrape(b_url)}
    t0 = time.monotonic()
    a_objects_before = l1_objects(a_srv)

    progress(f"request 1: prompt to {ia.id} (cold)")
    starts = [time.monotonic() - t0]
    r_a = complete(a_url, model, prompt, max_tokens)
    wait_l1_objects(a_srv, a_objects_before + chunks, time.monotonic() + L1_OBJECTS_WAIT_S)
    progress(f"request 2: same prompt to {ib.id} (its cache never saw it)")
    starts.append(time.monotonic() - t0)
    r_b = complete(b_url, model, prompt, max_tokens)
    b_between = metrics_api.scrape(b_url)      # B's engine after its one request: that request's own split
    progress(f"request 3: fresh control prompt to {ib.id}")
    starts.append(time.monotonic() - t0)
    r_c = complete(b_url, model, control, max_tokens)
    files.write_json(out_dir / "status_after.json", snapshot(ctx))

    after = {"a": metrics_api.scrape(a_srv), "b": metrics_api.scrape(b_srv), "b_engine": metrics_api.scrape(b_url)}

    def delta(which: str, name: str, **labels: str) -> float:
        return grew(before[which], after[which], name, **labels)

    p2p_loads = delta("b", metrics_api.P2P_LOADS, l2_name="p2p")
    mismatch = delta("b_engine", KV_MISMATCH)
    peer_hit_tokens = delta("b", PEER_HIT_TOKENS)
    own_l1 = request.own_l1_hit(p2p_loads, peer_hit_tokens, delta("b", L1_HIT_TOKENS))
    vllm = ctx.fleet.runtime == "vllm"
    # The embedded engine counts the bytes it loaded. vLLM does not, and B's server holds pulled chunks only
    # while it hands them over, so take the peer-served tokens at the KV size per token of A's stored chunks.
    if vllm:
        stored, grown = (l1_objects(a_srv) - a_objects_before) * chunk, delta("a", L1_USED)
        kv_bytes = peer_hit_tokens * grown / stored if stored > 0 and grown > 0 else 0.0
    else:
        kv_bytes = delta("b_engine", ENGINE_LOADED_BYTES)
    need = (chunks - 1) * chunk

    checks = [
        Check("all requests succeeded", all(r.ok for r in (r_a, r_b, r_c)),
              "; ".join(f"{n}: {r.error or 'ok'}" for n, r in (("A", r_a), ("B", r_b), ("control", r_c)))),
        Check(f"{ia.id} computed the prompt cold", r_a.ok and r_a.cached_tokens == 0,
              f"cached_tokens={r_a.cached_tokens}"),
        Check(f"{ib.id} served the prefix from cache", r_b.cached_tokens >= need,
              f"cached_tokens={r_b.cached_tokens}, need >= {need} ((chunks-1) x chunk size)"),
        Check(f"{ib.id}'s server pulled from its peer", p2p_loads > 0,
              f"{metrics_api.P2P_LOADS}{{l2_name=\"p2p\"}} rose by {p2p_loads:g}; "
              f"peer-served tokens {peer_hit_tokens:g}"),
        Check("outputs identical on A and B", r_a.ok and r_b.ok and bool(r_a.text) and r_a.text == r_b.text,
              f"A={r_a.text[:40]!r} B={r_b.text[:40]!r}"),
        Check(f"control prompt computed cold on {ib.id}", r_c.ok and r_c.cached_tokens == 0,
              f"cached_tokens={r_c.cached_tokens}"),
    ]
    external = delta("b_engine", TOKENS_BY_SOURCE, source="external_kv_transfer") if vllm else None
    if vllm:
        # cached_tokens also counts vLLM's own prefix cache; this proves the tokens came through LMCache.
        checks.insert(3, Check(f"{ib.id}'s vLLM took the prefix through its KV connector", external >= need,
                               f'{TOKENS_BY_SOURCE}{{source="external_kv_transfer"}} rose by {external:g}'))
    passed = all(c.ok for c in checks)
    numbers = {"prompt_tokens": r_b.prompt_tokens or n_prompt, "ttft_cold_a_s": r_a.ttft_s,
               "ttft_peer_b_s": r_b.ttft_s, "ttft_control_b_s": r_c.ttft_s,
               "speedup_ttft": (r_a.ttft_s / r_b.ttft_s) if r_a.ttft_s and r_b.ttft_s else None,
               "cached_tokens_b": r_b.cached_tokens, "p2p_loads_b": p2p_loads,
               "peer_hit_tokens_b": peer_hit_tokens, "kv_bytes_pulled_b": kv_bytes,
               **({"external_kv_tokens_b": external} if vllm else {})}
    result = BasicResult(passed, ia.id, ib.id, chunk, chunks, checks, numbers,
                         {"a": asdict(r_a), "b": asdict(r_b), "control_b": asdict(r_c)},
                         run_dir=str(out_dir), notes=notes)
    served = r_b.cached_tokens >= need
    sent = [("a", na, ia, prompt, r_a, "", False), ("b", nb, ib, prompt, r_b, ia.id, not served),
            ("control_b", nb, ib, control, r_c, "", False)]
    by_source = ({k: v - engine_api.tokens_by_source(before["b_engine"]).get(k, 0.0)
                  for k, v in engine_api.tokens_by_source(b_between).items()} if vllm else {})
    write_requests(out_dir, sent, starts, {"b": by_source} if by_source else {})
    judged, explained = once(ctx), None      # the fleet judge, read at most once for explain and the cause
    if not served:
        progress(f"{ib.id} was not served from cache: explaining why (p2pctl explain, read-only)")
        result.explain, explained = explain_miss(ctx, out_dir, prompt, ia.id, ib.id, judged)
    if not passed:
        bad = next(((i.id, r.error) for i, r in ((ia, r_a), (ib, r_b)) if not r.ok), ("", ""))
        proved = request.request_cause(ib.id, ia.id, failed_on=bad[0], error=bad[1], cached_tokens=r_b.cached_tokens,
                                       mismatch_tokens=mismatch, own_l1=own_l1, identical=r_a.text == r_b.text)
        result.cause, said = request.proof_cause(proved, explained, judged, {ia.id, ib.id, na.name, nb.name})
        head = result.explain.get("verdict") if result.cause is not explained else ""
        result.likely_cause = f"explain on {ib.id}: {head}; {said}" if head else said
    write_result(out_dir, result)
    return result


def write_requests(out_dir: Path, sent: list[tuple], starts: list[float], by_source: dict) -> None:
    """prompts.jsonl and requests.csv. `by_source`: per request id, vLLM's prompt tokens by source for that
    request alone (vLLM's own prefix cache vs LMCache), where it was measured."""
    rows, records = [], []
    for (rid, node, inst, text, c, warmer, missed), t in zip(sent, starts):
        rows.append({"request": rid, "instance": inst.id, "node": node.name, "computed_on": warmer,
                     "missed": missed, "cached_tokens": c.cached_tokens, "prompt_tokens": c.prompt_tokens,
                     **({"tokens_by_source": by_source[rid]} if rid in by_source else {}), "prompt": text})
        records.append(RequestRecord("basic", 1, inst.id, node.name, warmer, rid, round(t, 4), c.prompt_tokens,
                                     c.cached_tokens, c.completion_tokens, c.ttft_s if c.ok else None, c.e2e_s,
                                     c.ok, c.error[:200]))
    write_prompts(out_dir, rows)
    write_csv(out_dir / "requests.csv", records)


def explain_miss(ctx: FleetContext, out_dir: Path, prompt: str, computed_on: str, target: str,
                 judged: Callable[[], Judgement]) -> tuple[dict, Optional[Verdict]]:
    """explain's verdict for B, saved next to the proof's results, and the cause of its first chunk not served."""
    found, ex = explain_request(ctx, out_dir, "b", prompt, computed_on, target, judged)
    if ex is not None:
        files.write_json(out_dir / "explain.json", ex.to_dict())
        files.write_text(out_dir / "explain.txt", "\n".join(explain.render_text(ex)) + "\n")
        found["differences"] = ex.differences
    return found, first_miss(ex)


def first_miss(ex: Optional[explain.Explanation]) -> Optional[Verdict]:
    return next((v for n in (ex.nodes if ex else []) for v in n.causes[:1]), None)


def write_result(out_dir: Path, result: BasicResult) -> None:
    files.write_json(out_dir / "result.json", result.to_dict())
    lines = [f"# Cross-node proof: {'PASS' if result.passed else 'FAIL'}", "",
             f"A = `{result.a}`, B = `{result.b}`, {result.chunks} chunks of {result.chunk_size} tokens", "",
             *check_table(result.checks), "", *figure_table(result.numbers)]
    if result.likely_cause:
        lines += ["", f"**Likely cause:** {result.likely_cause}"]
    if result.explain.get("strip"):
        lines += ["", f"**explain on {result.explain['instance']}:** `[{result.explain['strip']}]` "
                  f"{result.explain['verdict']} (explain.txt)"]
    lines += [f"- {note}" for note in result.notes]
    files.write_text(out_dir / "summary.md", "\n".join(lines) + "\n")
