"""Which placement, and what P2P adds under each: document QA through vllm-router, P2P on and off.

Two local fleets are started one after the other from the same spec: one whose servers join the P2P mesh and
one whose servers do not (`settings.p2p: false`, no `--p2p-advertise-url`). On each, the router is restarted
once per policy and the same document-QA workload runs with fresh documents, so no arm is served from what an
earlier one cached. Every finished arm is written out at once: a failure later keeps the rows before it.

Ports: the default plan, the router's included, at the first offset where all are free, or exactly at
`--port-offset K`; the choice is printed (one progress line) and kept in results.json.

The answer (`recommend`, `explanations`) is pure functions over the arms and turns. A P2P margin below 1 has few
measurable causes here: failed requests, no pull happened (the policy kept sessions on their owner; a P2P
server's transfer channel still busy-polls a core), pulls replaced no recompute, the pulls' work slowed the
shared cores (recomputed turns got slower too), or a pulled prefix cost more than the prefill it saved. Each is
named with the run's own figures; what is left is run-to-run variation.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from p2p_ops import files
from p2p_ops.bench import docqa
from p2p_ops.bench.strict_json import finite
from p2p_ops.endpoints import metrics_api
from p2p_ops.errors import BadInput, CouldNotRun
from p2p_ops.harness.basic import PEER_HIT_TOKENS
from p2p_ops.lifecycle import launch, procs
from p2p_ops.lifecycle import router as fleet_router
from p2p_ops.lifecycle.context import FleetContext
from p2p_ops.lifecycle.free_ports import PortChoice, choose, router_ports
from p2p_ops.lifecycle.render import render_fleet, write_rendered
from p2p_ops.observe import bench_plots
from p2p_ops.observe.records import RequestRecord
from p2p_ops.observe.stats import percentile
from p2p_ops.spec.load import load_fleet
from p2p_ops.spec.settings import ROUTER_POLICIES
from p2p_ops.spec.starter import dump_yaml, local_fleet
from p2p_runtime.timing_profiles import DEFAULT as DEFAULT_TIMING
from p2p_runtime.timing_profiles import TIMING_PROFILES, TimingProfile

POLICIES = ("round_robin", "power_of_two", "cache_aware", "kv_aware", "consistent_hash")
KV_HITS = "vllm_router_kv_placement_lookups_total"
KV_INPUTS = "vllm_router_kv_routing_inputs_total"
# Below this difference a margin is run-to-run variation on a shared box (bench/README.md: runs swing ~10 %).
NOISE = 0.10
SLOWER = 1.2


@dataclass
class PlacementOptions:
    policies: list[str] = field(default_factory=lambda: list(POLICIES))
    p2p_arms: list[bool] = field(default_factory=lambda: [True, False])
    nodes: int = 2
    # One named profile (p2p_runtime.timing_profiles), the same `calibrate` projects with by default.
    timing: str = DEFAULT_TIMING
    workload: docqa.DocQAOptions = field(default_factory=docqa.DocQAOptions)
    max_seconds: float = 1800.0
    # None: the first free offset of the default plan (free_ports.choose); else exactly this offset.
    port_offset: Optional[int] = None

    @classmethod
    def quick(cls, **kw) -> "PlacementOptions":
        wl = docqa.DocQAOptions(sessions=8, questions=3, doc_tokens=2048, inflight=4, max_tokens=4,
                                max_seconds=120.0)
        return cls(workload=wl, max_seconds=600.0, **kw)

    def validate(self) -> None:
        unknown = [p for p in self.policies if p not in ROUTER_POLICIES]
        if unknown:
            raise BadInput(f"--policies: unknown {', '.join(unknown)}; use some of {', '.join(ROUTER_POLICIES)}")
        if not self.policies:
            raise BadInput("--policies: name at least one policy, e.g. round_robin,cache_aware")
        if not 2 <= self.nodes <= 8:
            raise BadInput(f"--nodes {self.nodes}: placement needs 2..8 nodes (P2P needs a peer)")
        w = self.workload
        if w.sessions < 1 or w.questions < 2 or w.inflight < 1 or w.doc_tokens < 256:
            raise BadInput("--sessions >= 1, --questions >= 2, --inflight >= 1 and --doc-tokens >= 256 "
                           "(a second question is what a cache can serve)")


@dataclass
class ArmResult:
    policy: str
    p2p: bool
    turns: int
    failed: int
    wall_s: float
    req_per_s: float
    ttft_p50_ms: float
    ttft_p90_ms: float
    prompt_tokens: int
    local_tokens: int
    peer_tokens: int
    recomputed_tokens: int
    kv_hits: float = 0.0
    kv_inputs: float = 0.0
    error: str = ""


def summarize(policy: str, p2p: bool, turns: list[RequestRecord], wall_s: float, peer_tokens: float,
              kv_hits: float = 0.0, kv_inputs: float = 0.0) -> ArmResult:
    ok = [t for t in turns if t.ok]
    ttft = sorted(t.ttft_s * 1000 for t in ok)
    prompt = sum(t.prompt_tokens for t in ok)
    cached = sum(t.cached_tokens for t in ok)
    peer = int(min(max(peer_tokens, 0), cached))
    p50, p90 = (percentile(ttft, q) if ttft else float("nan") for q in (50, 90))
    return ArmResult(policy, p2p, len(turns), len(turns) - len(ok), wall_s, len(ok) / wall_s if wall_s else 0.0,
                     p50, p90, prompt, cached - peer, peer, prompt - cached, kv_hits, kv_inputs)


def fleet_data(n: int, p2p: bool, policy: str, ports: dict[str, int], timing: str, name: str) -> dict:
    data = local_fleet(n, name=name, base=ports)
    data["settings"].update(p2p=p2p, p2p_lookup_timeout=5.0, p2p_load_timeout=5.0)
    data["engine"].update(TIMING_PROFILES[timing].engine_settings())
    data["router"] = {"enabled": True, "policy": policy, **router_ports(ports)}
    return data


def switch_policy(ctx: FleetContext, data: dict, policy: str, timeout: float = 90.0) -> None:
    """Restart only the router, under another policy (engines and caches stay); the spec file says which."""
    if ctx.fleet.router.policy == policy and fleet_router.status(ctx).ready:
        return
    procs.stop(ctx.conn(ctx.fleet.router_node()), ctx.proc("router"))
    data["router"]["policy"] = policy
    files.write_text(ctx.fleet_file, dump_yaml(data))
    ctx.fleet = load_fleet(ctx.fleet_file)
    write_rendered([f for f in render_fleet(ctx.fleet, ctx.node_layout) if f.unit == "router"], ctx.layout)
    procs.start(ctx.conn(ctx.fleet.router_node()), ctx.proc("router"))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if fleet_router.status(ctx).ready:
            return
        time.sleep(0.5)
    raise CouldNotRun(f"router under {policy} not ready after {timeout:.0f} s; log: {ctx.proc('router').log}")


def _scrape_servers(ctx: FleetContext) -> list:
    return [metrics_api.scrape(ctx.server_url(n, i)) for n, i in ctx.fleet.instances()]


def _router_metrics(ctx: FleetContext) -> list:
    node = ctx.fleet.router_node()
    return metrics_api.scrape(f"http://{node.address}:{ctx.fleet.router.prometheus_port}")


def run(out_dir: Path, opts: PlacementOptions, progress: Callable[[str], None] = lambda _: None) -> list[ArmResult]:
    opts.validate()
    # Both arms run one after the other on the same ports (the first is down before the second starts).
    choice = choose(opts.nodes, opts.port_offset, router=True)
    progress(choice.line())
    files.make_dirs(out_dir)
    deadline = time.monotonic() + opts.max_seconds
    results: list[ArmResult] = []
    turns_out: list[dict] = []
    for p2p in opts.p2p_arms:
        arm = "on" if p2p else "off"
        data = fleet_data(opts.nodes, p2p, opts.policies[0], choice.base, opts.timing, f"placement-p2p-{arm}")
        progress(f"P2P {arm}: starting {opts.nodes} nodes + router")
        try:
            with launch.temporary(data, out_dir / f"fleet-p2p-{arm}", progress=progress, wait_timeout=120) as ctx:
                for policy in opts.policies:
                    if time.monotonic() > deadline:
                        progress(f"time bound reached: skipping {policy} (P2P {arm})")
                        continue
                    results.append(_run_arm(ctx, data, policy, p2p, opts, turns_out, progress))
                    _write(out_dir, results, turns_out, opts, choice)
        except Exception as exc:  # noqa: BLE001 - finished arms stay; the failure is recorded
            progress(f"P2P {arm}: {type(exc).__name__}: {exc}")
            results.append(ArmResult("(fleet)", p2p, 0, 0, 0, 0, float("nan"), float("nan"), 0, 0, 0, 0,
                                     error=f"{type(exc).__name__}: {exc}"[:500]))
            _write(out_dir, results, turns_out, opts, choice)
    return results


def _run_arm(ctx: FleetContext, data: dict, policy: str, p2p: bool, opts: PlacementOptions, turns_out: list,
             progress: Callable[[str], None]) -> ArmResult:
    label = f"{policy}-p2p-{'on' if p2p else 'off'}"
    switch_policy(ctx, data, policy)
    progress(f"{label}: {opts.workload.sessions} sessions x {opts.workload.questions} questions")
    before, rbefore = _scrape_servers(ctx), _router_metrics(ctx)
    turns, wall = docqa.run(ctx.fleet.router_url, ctx.fleet.model, opts.workload, label, progress)
    after, rafter = _scrape_servers(ctx), _router_metrics(ctx)
    peer = sum(metrics_api.metric_sum(a, PEER_HIT_TOKENS) - metrics_api.metric_sum(b, PEER_HIT_TOKENS)
               for a, b in zip(after, before))
    hits = metrics_api.metric_sum(rafter, KV_HITS, result="hit") - metrics_api.metric_sum(rbefore, KV_HITS, result="hit")
    inputs = metrics_api.metric_sum(rafter, KV_INPUTS) - metrics_api.metric_sum(rbefore, KV_INPUTS)
    turns_out += [{"arm": label, **asdict(t)} for t in turns]
    res = summarize(policy, p2p, turns, wall, peer, hits, inputs)
    progress(f"{label}: {res.req_per_s:.2f} req/s, TTFT p50 {res.ttft_p50_ms:.0f} ms, "
             f"peer tokens {res.peer_tokens}, failed {res.failed}")
    return res


def document(results: list[ArmResult], opts: PlacementOptions, ports: PortChoice,
             turns: Optional[list[dict]] = None) -> dict[str, Any]:
    profile = TIMING_PROFILES[opts.timing]
    m = margins(results)
    return finite({"options": asdict(opts), "ports": ports.to_json(),
                   "timing": {"profile": profile.name, "describe": profile.describe(),
                              "settings": profile.engine_settings()},
                   "arms": [asdict(r) for r in results], "margins": m,
                   "recommendation": recommend(results, m, opts.workload, profile),
                   "below_one": explanations(results, m, turns or [], profile)})


def _write(out_dir: Path, results: list[ArmResult], turns: list[dict], opts: PlacementOptions,
           ports: PortChoice) -> None:
    files.write_json(out_dir / "results.json", document(results, opts, ports, turns))
    files.write_text(out_dir / "turns.json", json.dumps(turns))
    files.write_text(out_dir / "summary.md", markdown(results, opts, turns))
    bench_plots.placement(out_dir, results)


def margins(results: list[ArmResult]) -> dict[str, dict]:
    out = {}
    for policy in dict.fromkeys(r.policy for r in results):
        on = next((r for r in results if r.policy == policy and r.p2p and not r.error), None)
        off = next((r for r in results if r.policy == policy and not r.p2p and not r.error), None)
        if on and off and off.req_per_s and on.ttft_p50_ms:
            out[policy] = {"throughput_x": on.req_per_s / off.req_per_s,
                           "ttft_p50_x": off.ttft_p50_ms / on.ttft_p50_ms,
                           "ttft_p90_x": off.ttft_p90_ms / on.ttft_p90_ms if on.ttft_p90_ms else float("nan")}
    return out


def markdown(results: list[ArmResult], opts: PlacementOptions, turns: Optional[list[dict]] = None) -> str:
    w = opts.workload
    profile = TIMING_PROFILES[opts.timing]
    lines = [f"# Placement x P2P: document QA through vllm-router ({opts.nodes} nodes)", "",
             f"{w.sessions} sessions x {w.questions} questions, {w.doc_tokens}-token private documents, "
             f"{w.inflight} sessions in flight, {w.max_tokens} output tokens.", "",
             f"Timing profile {profile.describe()}.", "",
             "| Placement | P2P | Served req/s | TTFT p50 / p90 (ms) | Tokens local / peer / recomputed | "
             "kv_aware hits | Failed |",
             "|---|---|---|---|---|---|---|"]
    for r in results:
        if r.error:
            lines.append(f"| {r.policy} | {'yes' if r.p2p else 'no'} | — | — | — | — | error: {r.error[:80]} |")
            continue
        lines.append(f"| {r.policy} | {'yes' if r.p2p else 'no'} | {r.req_per_s:.2f} | "
                     f"{r.ttft_p50_ms:,.0f} / {r.ttft_p90_ms:,.0f} | {r.local_tokens:,} / {r.peer_tokens:,} / "
                     f"{r.recomputed_tokens:,} | {r.kv_hits:g} | {r.failed} |")
    m = margins(results)
    if m:
        lines += ["", "P2P margin within each policy (P2P on vs off):", "",
                  "| Placement | Served req/s (on / off) | TTFT p50 (off / on) | TTFT p90 (off / on) |",
                  "|---|---|---|---|"]
        for policy, v in m.items():
            lines.append(f"| {policy} | {v['throughput_x']:.2f}x | {v['ttft_p50_x']:.2f}x | "
                         f"{v['ttft_p90_x']:.2f}x |")
    causes = explanations(results, m, turns or [], profile)
    lines += ["", f"**Recommendation**: {recommend(results, m, w, profile)}."]
    lines += [f"- P2P margin below 1 under {policy}: {why}." for policy, why in causes.items()]
    lines += ["", "llm-d (8 pods, TCP, 48K-token documents): the pull added ~1.15x under token/cache-aware "
              "placement and ~1.55x under load-aware placement; cache-aware + P2P served 1.4x load-aware + P2P "
              "and 2.2x the affinity default.", ""]
    return "\n".join(lines)


def _p50(turns: list[dict], hit: bool) -> Optional[float]:
    ms = [t["ttft_s"] * 1000 for t in turns if t["ok"] and (t["cached_tokens"] > 0) == hit]
    return statistics.median(ms) if ms else None


def _ms(v: Optional[float]) -> str:
    return "n/a" if v is None else f"{v:,.0f} ms"


def explain(on: Any, off: Any, on_turns: list[dict], off_turns: list[dict], profile: TimingProfile) -> str:
    hit_on, hit_off = _p50(on_turns, True), _p50(off_turns, True)
    cold_on, cold_off = _p50(on_turns, False), _p50(off_turns, False)
    saved = off.recomputed_tokens - on.recomputed_tokens
    figures = (f"{on.peer_tokens:,} tokens pulled; recomputed {on.recomputed_tokens:,} vs "
               f"{off.recomputed_tokens:,} tokens; TTFT p50 of cache hits {_ms(hit_on)} vs {_ms(hit_off)}, of "
               f"recomputes {_ms(cold_on)} vs {_ms(cold_off)} (P2P on vs off)")
    if on.failed > off.failed:
        why = f"{on.failed} requests failed with P2P on ({off.failed} off)"
    elif on.peer_tokens == 0:
        why = "no pull happened: the policy kept each session where its document was, so P2P added only lookups"
        if cold_on and cold_off and cold_on > SLOWER * cold_off:
            why += (f", yet recomputes took {cold_on / cold_off:.1f}x longer with P2P on: each server's NIXL "
                    "transfer channel busy-polls a core (nixl 1.5.1), which a small box takes from the engines")
    elif saved <= 0:
        why = ("the pulls replaced no recompute: every pulled document would have been a local hit or was "
               "recomputed anyway")
    elif cold_on and cold_off and cold_on > SLOWER * cold_off:
        why = (f"the shared cores were busier with P2P on: recomputed turns took {cold_on / cold_off:.1f}x "
               "longer, so the servers' transfer work competed with the engines' compute")
    elif hit_on and hit_off and hit_on > SLOWER * hit_off:
        why = (f"a pulled document cost more than a local hit ({_ms(hit_on)} vs {_ms(hit_off)} p50), more than "
               f"the ~{profile.prefill_ms(saved) / 1000:,.1f} s of {profile.name} prefill its {saved:,} saved "
               "tokens were worth")
    else:
        why = f"within run-to-run variation on this shared box (under {NOISE:.0%})"
    return f"{why} ({figures})"


def recommend(results: list, margins: dict[str, dict], workload: Any, profile: TimingProfile) -> str:
    """The arm with the most served req/s among those without failures, and whether P2P pays under it."""
    ok = [r for r in results if not r.error and not r.failed and r.turns]
    if not ok:
        return "none: no arm finished without failures"
    best = max(ok, key=lambda r: (r.req_per_s, -r.ttft_p50_ms))
    m = margins.get(best.policy)
    p2p = "on" if best.p2p else "off"
    line = (f"for document Q&A with {workload.doc_tokens}-token documents ({workload.sessions} sessions, "
            f"{workload.inflight} in flight), timing profile {profile.name}: run {best.policy} with P2P {p2p} "
            f"({best.req_per_s:.2f} req/s, TTFT p50 {best.ttft_p50_ms:,.0f} ms)")
    if m and not best.p2p:
        line += (f"; P2P does not pay under it here ({m['throughput_x']:.2f}x req/s): `p2pctl calibrate --timing "
                 f"{profile.name}` gives the prefix length from which it would")
    elif m:
        line += f"; P2P adds {m['throughput_x']:.2f}x req/s under it"
    return line


def explanations(results: list, margins: dict[str, dict], turns: list[dict],
                 profile: TimingProfile) -> dict[str, str]:
    """Why P2P's margin fell below 1, per policy where it did (turns carry their arm's label)."""
    out = {}
    for policy in (p for p, v in margins.items() if min(v["throughput_x"], v["ttft_p50_x"]) < 1):
        on, off = (next(r for r in results if r.policy == policy and r.p2p == p and not r.error)
                   for p in (True, False))
        arm = {p: [t for t in turns if t.get("arm") == f"{policy}-p2p-{p}"] for p in ("on", "off")}
        out[policy] = explain(on, off, arm["on"], arm["off"], profile)
    return out
