"""Every pair proven: each node computes a fresh prefix, and every other node pulls it from that node.

For each instance S in turn: a prompt nobody has seen (`chunks` full chunks and a half) goes to S's engine and
is computed cold; S's server stores it. Then it goes to every other instance T. T's server holds nothing of it
(a pulled chunk is only a temporary copy in T's L1, and T's engine stores no chunk it loaded), so S is the only
peer that can serve it, and pair S -> T passes when T served every full chunk from cache, T's server counted a
P2P load, T answered exactly as S did, and T's engine found no byte of the loaded KV out of place.

One mis-advertised URL or one blocked port breaks some pairs while the rest pass: a failing pair's cause is
`judge.request.proof_cause`'s, from the evidence `test basic` reads too: what the pair's own requests showed (the
target engine's KV-mismatch counter among them), explain's verdict on the target (once per source), else the one
judge's (`diagnose.judge`), read once for all failing pairs. Pairs not reached within `max_seconds` are skipped, never passed. The table and the heatmap
are drawn from the result's JSON document, so a saved result.json redraws the same way.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from p2p_ops import files
from p2p_ops.causes import Verdict
from p2p_ops.diagnose import explain
from p2p_ops.diagnose.judge import request
from p2p_ops.diagnose.judge.fleet import once
from p2p_ops.endpoints import lmcache_api, metrics_api
from p2p_ops.endpoints.metrics_api import (ENGINE_LOADED_BYTES, ENGINE_OP_SECONDS, KV_MISMATCH, L1_HIT_TOKENS,
                                           PEER_HIT_TOKENS)
from p2p_ops.errors import BadInput
from p2p_ops.harness import basic, prompts
from p2p_ops.harness.openai_client import Completion, complete
from p2p_ops.harness.rundir import new_run_dir
from p2p_ops.lifecycle.context import FleetContext
from p2p_ops.observe import charts


@dataclass
class Pair:
    """Pair source -> target: the target pulled what the source computed."""

    source: str
    target: str
    ok: bool = False
    skipped: bool = False
    cached_tokens: int = 0
    need: int = 0
    p2p_loads: float = 0.0
    own_l1: bool = False            # L1 hits and nothing from a peer on the target (judge.request.own_l1_hit)
    identical: bool = False
    kv_bytes: float = 0.0
    mismatch_tokens: float = 0.0
    pull_ms: Optional[float] = None
    pull_measure: str = ""
    ttft_ms: Optional[float] = None
    error: str = ""
    likely_cause: str = ""          # the cause in words (`cause`: its verdict)
    cause: Optional[Verdict] = None

    @property
    def mbps(self) -> Optional[float]:
        if not self.pull_ms or not self.kv_bytes:
            return None
        return self.kv_bytes / (self.pull_ms / 1000) / 1e6

    def to_dict(self) -> dict:
        return asdict(self) | {"mbps": self.mbps, "cause": self.cause.to_dict() if self.cause else None}


@dataclass
class MatrixResult:
    passed: bool
    instances: list[str]
    pairs: list[Pair]
    chunk_size: int
    chunks: int
    seconds: float
    max_seconds: float
    profile: str = ""
    run_dir: str = ""
    notes: list[str] = field(default_factory=list)

    def pair(self, source: str, target: str) -> Optional[Pair]:
        return next((p for p in self.pairs if p.source == source and p.target == target), None)

    @property
    def counts(self) -> dict[str, int]:
        return {"pairs": len(self.pairs), "passed": sum(p.ok for p in self.pairs),
                "failed": sum(not p.ok and not p.skipped for p in self.pairs),
                "skipped": sum(p.skipped for p in self.pairs)}

    def to_dict(self) -> dict:
        return asdict(self) | {"counts": self.counts, "pairs": [p.to_dict() for p in self.pairs]}


def default_max_seconds(n: int) -> float:
    """A bound that an 8-node matrix on a busy 2-core box finishes well inside (about 2 s a pull there)."""
    return 60.0 + 8.0 * n * (n - 1)


def run_matrix(ctx: FleetContext, chunks: int = 4, max_tokens: int = 8, seed: Optional[int] = None,
               max_seconds: Optional[float] = None, progress: Callable[[str], None] = lambda _: None,
               out_dir: Optional[Path] = None) -> MatrixResult:
    """Prove every ordered pair of the fleet's instances; always writes result.json, summary.md and heatmap.png."""
    if chunks < 1:
        raise BadInput(f"--chunks {chunks}: use at least 1 so that there is a chunk to pull")
    insts = ctx.fleet.instances()
    if len(insts) < 2:
        raise BadInput("the matrix needs at least two instances in the fleet")
    started = time.monotonic()
    max_seconds = max_seconds or default_max_seconds(len(insts))
    deadline = started + max_seconds
    seed = int(time.time() * 1000) % 10**9 if seed is None else seed
    chunk = lmcache_api.server_status(ctx.server_url(*insts[0])).chunk_size or ctx.fleet.settings.chunk_size
    pairs: list[Pair] = []
    sent: dict[str, str] = {}       # source -> the prefix it computed
    for index, src in enumerate(insts):
        targets = [t for t in insts if t[1].id != src[1].id]
        if time.monotonic() > deadline:
            pairs += [Pair(src[1].id, t[1].id, skipped=True, error="time bound reached") for t in targets]
            continue
        got, sent[src[1].id] = _from_source(ctx, src, targets, chunk, chunks, max_tokens, seed, index, deadline,
                                            progress)
        pairs += got
    out_dir = out_dir or new_run_dir(ctx.layout, "matrix")
    files.make_dirs(out_dir)
    failing = [p for p in pairs if not p.ok and not p.skipped]
    if failing:
        progress(f"{len(failing)} pair(s) failed: gathering likely causes")
        explain_failing(ctx, failing, sent, out_dir)
    result = MatrixResult(not any(not p.ok for p in pairs), [i.id for _, i in insts], pairs, chunk, chunks,
                          time.monotonic() - started, max_seconds, run_dir=str(out_dir),
                          profile=ctx.fleet.engine.profile if ctx.fleet.runtime == "embedded" else "")
    if any(p.skipped for p in pairs):
        result.notes.append(f"time bound of {max_seconds:.0f} s reached: skipped pairs are not proven "
                            "(raise --max-seconds)")
    write_result(out_dir, result)
    return result


def _from_source(ctx: FleetContext, src, targets, chunk: int, chunks: int, max_tokens: int, seed: int, index: int,
                 deadline: float, progress: Callable[[str], None]) -> tuple[list[Pair], str]:
    """Every pair from this source, and the prefix it computed."""
    (ns, is_), model = src, ctx.fleet.model
    src_url, src_srv = ctx.engine_url(ns, is_), ctx.server_url(ns, is_)
    prompt, n = prompts.sized_document(src_url, model, seed, index, chunks * chunk + chunk // 2)
    need = (n - 1) // chunk * chunk
    objects = basic.l1_objects(src_srv)
    progress(f"{is_.id}: computing a fresh {n}-token prefix ({need // chunk} chunks to pull)")
    cold = complete(src_url, model, prompt, max_tokens, timeout=_left(deadline))
    if not cold.ok or cold.cached_tokens:
        why = cold.error or f"it reported {cold.cached_tokens} cached tokens for a fresh prompt"
        return [Pair(is_.id, t[1].id, need=need, error=f"source {is_.id} could not compute the prefix cold: {why}")
                for t in targets], prompt
    until = min(deadline, time.monotonic() + basic.L1_OBJECTS_WAIT_S)
    basic.wait_l1_objects(src_srv, objects + need // chunk, until)
    out = []
    for nt, it in targets:
        if time.monotonic() > deadline:
            out.append(Pair(is_.id, it.id, need=need, skipped=True, error="time bound reached"))
            continue
        out.append(_pull(ctx, (nt, it), is_.id, prompt, cold, need, max_tokens, deadline))
        p = out[-1]
        progress(f"  {is_.id} -> {it.id}: {'PASS' if p.ok else 'FAIL'} ({p.cached_tokens}/{need} cached"
                 + (f", {p.mbps:.0f} MB/s" if p.mbps else "") + ")")
    return out, prompt


def _pull(ctx: FleetContext, target, source_id: str, prompt: str, cold: Completion, need: int, max_tokens: int,
          deadline: float) -> Pair:
    nt, it = target
    t_url, t_srv = ctx.engine_url(nt, it), ctx.server_url(nt, it)
    before = (metrics_api.scrape(t_srv), metrics_api.scrape(t_url))
    r = complete(t_url, ctx.fleet.model, prompt, max_tokens, timeout=_left(deadline))
    after = (metrics_api.scrape(t_srv), metrics_api.scrape(t_url))

    def delta(which: int, name: str, **labels: str) -> float:
        return basic.grew(before[which], after[which], name, **labels)

    loads = delta(0, metrics_api.P2P_LOADS, l2_name="p2p")
    pair = Pair(source_id, it.id, cached_tokens=r.cached_tokens, need=need, p2p_loads=loads,
                kv_bytes=delta(1, ENGINE_LOADED_BYTES),
                own_l1=request.own_l1_hit(loads, delta(0, PEER_HIT_TOKENS), delta(0, L1_HIT_TOKENS)),
                identical=r.ok and bool(cold.text) and r.text == cold.text, mismatch_tokens=delta(1, KV_MISMATCH),
                ttft_ms=r.ttft_s * 1000 if r.ttft_s else None, error=r.error)
    op = ENGINE_OP_SECONDS + "_sum"
    engine_pull = delta(1, op, op="lookup") + delta(1, op, op="retrieve")
    if engine_pull > 0:
        pair.pull_ms, pair.pull_measure = engine_pull * 1000, "engine lookup + retrieve"
    elif pair.ttft_ms:
        pair.pull_ms, pair.pull_measure = pair.ttft_ms, "TTFT (the engine reports no LMCache op times)"
    pair.ok = (r.ok and r.cached_tokens >= need and pair.p2p_loads > 0 and pair.identical
               and pair.mismatch_tokens == 0)
    return pair


def _left(deadline: float) -> float:
    return max(5.0, min(120.0, deadline - time.monotonic()))


def write_result(out_dir: Path, result: MatrixResult) -> None:
    files.write_json(out_dir / "result.json", result.to_dict())
    files.write_text(out_dir / "summary.md", markdown(result.to_dict()))
    try:
        heatmap(out_dir / "heatmap.png", result.to_dict())
    except Exception as exc:  # noqa: BLE001 - a broken plot must not lose the table
        result.notes.append(f"heatmap failed: {exc!r}")
        files.write_json(out_dir / "result.json", result.to_dict())


def explain_failing(ctx: FleetContext, failing: list[Pair], sent: dict[str, str], out_dir: Path) -> None:
    """Each failing pair's cause, as `test basic` names its own (`judge.request.proof_cause`): explain runs once per
    source on the targets whose requests prove nothing, the fleet judge once for all."""
    judged, proved = once(ctx), {id(p): request_cause(p) for p in failing}
    unexplained = {p.source: [q.target for q in failing if q.source == p.source and proved[id(q)] is None]
                   for p in failing}
    explained: dict[tuple[str, str], Verdict] = {}
    for source, targets in unexplained.items():
        spec = explain.PromptSpec(f"the prefix {source} computed ({out_dir.name})", text=sent[source],
                                  computed_on=source, run=str(out_dir))
        try:
            ex = explain.run(ctx, spec, targets, judged=judged) if targets else None
        except Exception:  # noqa: BLE001 - the pairs' own evidence and the judge still name a cause
            ex = None
        explained |= {(source, n.instance): n.causes[0] for n in (ex.nodes if ex else []) if n.causes}
    for p in failing:
        about = {p.source, p.target} | {ctx.fleet.instance(i)[0].name for i in (p.source, p.target)}
        p.cause, p.likely_cause = request.proof_cause(proved[id(p)], explained.get((p.source, p.target)), judged,
                                                      about)


def request_cause(p: Pair) -> Optional[Verdict]:
    """What the pair's requests themselves prove (None when they prove nothing about why)."""
    failed = p.source if p.error.startswith("source ") else p.target if p.error else ""
    return request.request_cause(p.target, p.source, failed_on=failed, error=p.error, cached_tokens=p.cached_tokens,
                                 mismatch_tokens=p.mismatch_tokens, own_l1=p.own_l1, identical=p.identical)


def _pairs(doc: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(p["source"], p["target"]): p for p in doc["pairs"]}


def cell_text(p: Optional[dict[str, Any]]) -> str:
    """One cell: verdict, cached/needed tokens, pull ms and MB/s."""
    if p is None:
        return "—"
    if p["skipped"]:
        return "skipped"
    head = "PASS" if p["ok"] else "FAIL"
    pull = f", {p['pull_ms']:.0f} ms" if p.get("pull_ms") else ""
    rate = f", {p['mbps']:.0f} MB/s" if p.get("mbps") else ""
    return f"{head} {p['cached_tokens']}/{p['need']}{pull}{rate}"


def markdown(doc: dict[str, Any]) -> str:
    names, pairs, c = doc["instances"], _pairs(doc), doc["counts"]
    verdict = "PASS" if doc["passed"] else "FAIL"
    lines = [f"# Pair matrix: {verdict} ({c['passed']}/{c['pairs']} pairs"
             + (f", {c['skipped']} skipped" if c["skipped"] else "") + ")", "",
             f"Rows computed a fresh prefix of {doc['chunks']} chunks of {doc['chunk_size']} tokens"
             + (f" (KV profile {doc['profile']})" if doc.get("profile") else "")
             + "; columns pulled it. Cell: cached / needed tokens, pull time (the puller's LMCache lookup + "
             f"retrieve), KV MB/s. {doc['seconds']:.0f} s of a {doc['max_seconds']:.0f} s bound.", "",
             "| source \\ target | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for s in names:
        row = [cell_text(pairs.get((s, t))) if s != t else "·" for t in names]
        lines.append(f"| {s} | " + " | ".join(row) + " |")
    causes = [p for p in doc["pairs"] if not p["ok"] and not p["skipped"]]
    if causes:
        lines += ["", "| failing pair | likely cause |", "|---|---|"]
        lines += [f"| {p['source']} -> {p['target']} | {p['likely_cause'] or p['error']} |" for p in causes]
    lines += [""] + [f"- {n}" for n in doc.get("notes") or []]
    return "\n".join(lines).rstrip() + "\n"


def heatmap(path: Path, doc: dict[str, Any]) -> None:
    """Green/red cells (grey: skipped, white: the diagonal), annotated with MB/s or FAIL."""
    from matplotlib.colors import ListedColormap

    names, pairs = doc["instances"], _pairs(doc)
    n = len(names)
    grid = [[_look(pairs.get((s, t)))[0] if s != t else 0 for t in names] for s in names]
    fig, ax = charts.figure((1.2 + 0.9 * n, 1.0 + 0.8 * n))
    ax.imshow(grid, cmap=ListedColormap(["#ffffff", "#4caf50", "#e53935", "#bdbdbd"]), vmin=0, vmax=3)
    for i, s in enumerate(names):
        for j, t in enumerate(names):
            if s != t:
                ax.text(j, i, _look(pairs.get((s, t)))[1], ha="center", va="center", fontsize=7)
    ax.set_xticks(range(n), names, rotation=45, ha="right", fontsize=8)
    ax.set_yticks(range(n), names, fontsize=8)
    ax.set_xlabel("pulled by (target)")
    ax.set_ylabel("computed on (source)")
    c = doc["counts"]
    profile = f" ({doc['profile']})" if doc.get("profile") else ""
    ax.set_title(f"P2P pair matrix: {c['passed']}/{c['pairs']} pass{profile}", fontsize=9)
    charts.save(fig, path)


def _look(p: Optional[dict[str, Any]]) -> tuple[int, str]:
    """A cell's colour index and its text."""
    if p is None or p["skipped"]:
        return 3, "skip"
    if not p["ok"]:
        return 2, "FAIL"
    return 1, f"{p['mbps']:.0f}\nMB/s" if p.get("mbps") else "ok"
