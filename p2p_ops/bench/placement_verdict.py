"""`bench placement`'s verdict (pure): measured arms into their medians over the repeats with min-max, P2P's
margin per policy (on and off paired by repeat), one recommendation, why a margin fell below 1 (the one judge's,
`diagnose.judge.margin`), and the report, in which arms that never ran get no section.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, Optional

from p2p_ops.bench import docqa
from p2p_ops.diagnose.judge import margin
from p2p_ops.errors import BadInput
from p2p_ops.observe.records import RequestRecord
from p2p_ops.observe.stats import finite, median, percentile, span, straddles, with_spread
from p2p_ops.spec.settings import ROUTER_POLICIES
from p2p_runtime.timing_profiles import DEFAULT as DEFAULT_TIMING
from p2p_runtime.timing_profiles import TIMING_PROFILES, TimingProfile

if TYPE_CHECKING:
    from p2p_ops.lifecycle.free_ports import PortChoice

# Figures shown as median (min-max) over an arm's repeats; the others are medians only.
SPREAD = ("req_per_s", "ttft_p50_ms", "ttft_p90_ms")
# 3: the fewest repeats whose median is not one of two ends; 5 for a full run, as llm-d's published medians.
QUICK_REPEATS, FULL_REPEATS = 3, 5
NAN = float("nan")
POLICIES = ("round_robin", "power_of_two", "cache_aware", "kv_aware", "consistent_hash")


@dataclass
class PlacementOptions:
    policies: list[str] = field(default_factory=lambda: list(POLICIES))
    p2p_arms: list[bool] = field(default_factory=lambda: [True, False])
    nodes: int = 2
    # One named profile (p2p_runtime.timing_profiles), the same `calibrate` projects with by default.
    timing: str = DEFAULT_TIMING
    workload: docqa.DocQAOptions = field(default_factory=docqa.DocQAOptions)
    repeats: int = FULL_REPEATS
    repeat_s: float = 1800.0
    # The whole run's bound; None: repeat_s per repeat.
    max_seconds: Optional[float] = None
    # None: the first free offset of the default plan (free_ports.choose); else exactly this offset.
    port_offset: Optional[int] = None
    # "ours" (harness client) or "inference-perf" (the same sessions; its tokenizer folder and venv, resolved).
    generator: str = "ours"
    tokenizer: str = ""
    inference_perf_venv: str = ""

    @classmethod
    def quick(cls, **kw) -> "PlacementOptions":
        wl = docqa.DocQAOptions(sessions=8, questions=3, doc_tokens=2048, inflight=4, max_tokens=4,
                                max_seconds=120.0)
        return cls(workload=wl, repeats=QUICK_REPEATS, repeat_s=600.0, **kw)

    def validate(self) -> None:
        unknown = [p for p in self.policies if p not in ROUTER_POLICIES]
        if unknown:
            raise BadInput(f"--policies: unknown {', '.join(unknown)}; use some of {', '.join(ROUTER_POLICIES)}")
        if not self.policies:
            raise BadInput("--policies: name at least one policy, e.g. round_robin,cache_aware")
        if self.repeats < 1:
            raise BadInput(f"--repeats {self.repeats}: give 1 or more ({QUICK_REPEATS} shows a median with its spread)")
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
    repeat: int = 1     # which repeat this run was (0: an aggregate of `repeats` of them)
    repeats: int = 1
    spread: dict[str, list[float]] = field(default_factory=dict)   # SPREAD figures' min-max over the repeats


def summarize(policy: str, p2p: bool, turns: list[RequestRecord], wall_s: float, peer_tokens: float,
              kv_hits: float = 0.0, kv_inputs: float = 0.0) -> ArmResult:
    ok = [t for t in turns if t.ok]
    ttft = [t.ttft_s * 1000 for t in ok]
    prompt = sum(t.prompt_tokens for t in ok)
    cached = sum(t.cached_tokens for t in ok)
    peer = int(min(max(peer_tokens, 0), cached))
    p50, p90 = (percentile(ttft, q) if ttft else NAN for q in (50, 90))
    return ArmResult(policy, p2p, len(turns), len(turns) - len(ok), wall_s, len(ok) / wall_s if wall_s else 0.0,
                     p50, p90, prompt, cached - peer, peer, prompt - cached, kv_hits, kv_inputs)


def aggregate(results: list[ArmResult]) -> list[ArmResult]:
    """One row per arm (policy, P2P) over its runs without an error: each figure their median (tokens rounded),
    turns and failed their sums, `spread` the SPREAD figures' min-max; a fleet that failed stays its own row."""
    out = []
    for policy, p2p in dict.fromkeys((r.policy, r.p2p) for r in results if not r.error):
        runs = [r for r in results if (r.policy, r.p2p) == (policy, p2p) and not r.error]
        first = runs[0]
        medians = {f: median((getattr(r, f) for r in runs), NAN) for f in
                   ("wall_s", "req_per_s", "ttft_p50_ms", "ttft_p90_ms", "prompt_tokens", "local_tokens",
                    "peer_tokens", "recomputed_tokens", "kv_hits", "kv_inputs")}
        medians = {f: round(v) if isinstance(getattr(first, f), int) else v for f, v in medians.items()}
        out.append(replace(first, **medians, turns=sum(r.turns for r in runs), failed=sum(r.failed for r in runs),
                           repeat=0, repeats=len(runs),
                           spread={f: s for f in SPREAD if (s := span(getattr(r, f) for r in runs))}))
    return out + [r for r in results if r.error]


def margins(results: list[ArmResult]) -> dict[str, dict]:
    """Per policy, P2P on against off: each ratio the median over the repeats that ran both (paired by repeat,
    as they ran minutes apart), `range` its min-max, `repeats` how many pairs."""
    out = {}
    for policy in dict.fromkeys(r.policy for r in results):
        arm = {p: {r.repeat: r for r in results if r.policy == policy and r.p2p == p and not r.error}
               for p in (True, False)}
        pairs = [(on, arm[False][k]) for k, on in arm[True].items()
                 if k in arm[False] and arm[False][k].req_per_s and on.ttft_p50_ms]
        if not pairs:
            continue
        ratios = {"throughput_x": [on.req_per_s / off.req_per_s for on, off in pairs],
                  "ttft_p50_x": [off.ttft_p50_ms / on.ttft_p50_ms for on, off in pairs],
                  "ttft_p90_x": [off.ttft_p90_ms / on.ttft_p90_ms if on.ttft_p90_ms else NAN
                                 for on, off in pairs]}
        out[policy] = {**{k: median(v, NAN) for k, v in ratios.items()}, "repeats": len(pairs),
                       "range": {k: span(v) for k, v in ratios.items()}}
    return out


def _x(margin: dict, key: str) -> str:
    return with_spread(margin[key], margin["range"][key], "{:.2f}x") if margin[key] == margin[key] else "n/a"


def markdown(results: list[ArmResult], opts: PlacementOptions, turns: Optional[list[dict]] = None) -> str:
    w = opts.workload
    profile = TIMING_PROFILES[opts.timing]
    lines = [f"# Placement x P2P: document QA through vllm-router ({opts.nodes} nodes)", "",
             f"{w.sessions} sessions x {w.questions} questions, {w.doc_tokens}-token private documents, "
             f"{w.inflight} sessions in flight, {w.max_tokens} output tokens; sent by "
             + ("inference-perf (conversation_replay, lengths in tokenizer tokens: half as many)."
                if opts.generator == "inference-perf" else "the toolkit's own client."), "",
             f"Timing profile {profile.describe()}.", "",
             f"Each figure is the median of an arm's repeats ({opts.repeats} asked, arms interleaved), with their "
             "min-max in brackets where they differ; tokens are medians, failed a sum.", "",
             "| Placement | P2P | Repeats | Served req/s | TTFT p50 / p90 (ms) | Tokens local / peer / recomputed | "
             "kv_aware hits | Failed |",
             "|---|---|---|---|---|---|---|---|"]
    arms = aggregate(results)
    for r in arms:
        if r.error:
            lines.append(f"| {r.policy} | {'yes' if r.p2p else 'no'} | repeat {r.repeat} | — | — | — | — | "
                         f"error: {r.error[:80]} |")
            continue
        p50, p90 = (with_spread(getattr(r, f), r.spread.get(f), "{:,.0f}") for f in ("ttft_p50_ms", "ttft_p90_ms"))
        lines.append(f"| {r.policy} | {'yes' if r.p2p else 'no'} | {r.repeats} | "
                     f"{with_spread(r.req_per_s, r.spread.get('req_per_s'), '{:.2f}')} | {p50} / {p90} | "
                     f"{r.local_tokens:,} / {r.peer_tokens:,} / {r.recomputed_tokens:,} | {r.kv_hits:g} | "
                     f"{r.failed} |")
    if all(r.error for r in arms):   # no arm ran: nothing to compare, recommend or set beside llm-d's figures
        return "\n".join(lines + [""])
    m = margins(results)
    if m:
        lines += ["", "P2P margin within each policy (P2P on vs off, the median of each repeat's ratio, min-max):",
                  "", "| Placement | Served req/s (on / off) | TTFT p50 (off / on) | TTFT p90 (off / on) |",
                  "|---|---|---|---|"]
        for policy, v in m.items():
            lines.append(f"| {policy} | {_x(v, 'throughput_x')} | {_x(v, 'ttft_p50_x')} | {_x(v, 'ttft_p90_x')} |")
    causes = explanations(results, m, turns or [], profile)
    lines += ["", f"**Recommendation**: {recommend(results, m, w, profile)}."]
    lines += [f"- P2P margin below 1 under {policy}: {why}." for policy, (why, _) in causes.items()]
    lines += ["", "llm-d (8 pods, TCP, 48K-token documents): the pull added ~1.15x under token/cache-aware "
              "placement and ~1.55x under load-aware placement; cache-aware + P2P served 1.4x load-aware + P2P "
              "and 2.2x the affinity default.", ""]
    return "\n".join(lines)


def _arm(a: ArmResult) -> str:
    req, p50 = (with_spread(getattr(a, f), a.spread.get(f), spec)
                for f, spec in (("req_per_s", "{:.2f}"), ("ttft_p50_ms", "{:,.0f}")))
    return f"{a.policy} with P2P {'on' if a.p2p else 'off'} ({req} req/s, TTFT p50 {p50} ms)"


def recommend(results: list, margins: dict[str, dict], workload: Any, profile: TimingProfile) -> str:
    """The arm with the most served req/s (median over its repeats) among those without failures, and whether P2P
    pays under it; 'inconclusive on this box' where another arm's req/s range reaches the leader's, or where
    P2P's margin lies on both sides of 1."""
    arms = aggregate(results)
    ok = sorted((a for a in arms if not a.error and not a.failed and a.turns),
                key=lambda a: (a.req_per_s, -a.ttft_p50_ms), reverse=True)
    if not ok:
        return f"none: no arm {'finished without failures' if any(not a.error for a in arms) else 'ran'}"
    best = ok[0]
    line = (f"for document Q&A with {workload.doc_tokens}-token documents ({workload.sessions} sessions, "
            f"{workload.inflight} in flight), timing profile {profile.name}: ")
    # Any arm whose req/s reaches the leader's lowest repeat could lead on another run of this box.
    rivals = [a for a in ok[1:] if a.spread["req_per_s"][1] >= best.spread["req_per_s"][0]]
    if rivals:
        line += (f"inconclusive on this box between {' and '.join(_arm(a) for a in [best] + rivals)}: their served "
                 f"req/s over their repeats overlap")
    else:
        line += f"run {_arm(best)}"
    m = margins.get(best.policy)
    unsure = bool(m) and straddles(m["range"]["throughput_x"], 1.0)
    if unsure:
        line += (f"; P2P's margin under {best.policy} is inconclusive on this box ({_x(m, 'throughput_x')} req/s "
                 f"over {m['repeats']} repeats, on both sides of 1)")
    elif m and not best.p2p:
        line += (f"; P2P does not pay under {best.policy} here ({_x(m, 'throughput_x')} req/s): `p2pctl calibrate "
                 f"--timing {profile.name}` gives the prefix length from which it would")
    elif m:
        line += f"; P2P adds {_x(m, 'throughput_x')} req/s under {best.policy}"
    if rivals or unsure:
        line += (f"; more repeats (--repeats {max(5, 2 * best.repeats)}), an idle box or longer documents "
                 f"(--doc-tokens {2 * workload.doc_tokens}) would decide it")
    if best.repeats == 1:
        line += f" (one run per arm: no spread; --repeats {QUICK_REPEATS} shows it)"
    return line


def explanations(results: list, margins: dict[str, dict], turns: list[dict],
                 profile: TimingProfile) -> dict[str, margin.Said]:
    """Why P2P's margin fell below 1, per policy where it did (turns carry their arm's label): its words and the
    catalogue's verdict."""
    out = {}
    arms = aggregate(results)
    for policy, v in ((p, v) for p, v in margins.items() if min(v["throughput_x"], v["ttft_p50_x"]) < 1):
        on, off = (next(r for r in arms if r.policy == policy and r.p2p == p and not r.error) for p in (True, False))
        arm = {p: [t for t in turns if t.get("arm") == f"{policy}-p2p-{p}"] for p in ("on", "off")}
        why, cause = out[policy] = margin.placement(on, off, arm["on"], arm["off"], profile)
        if straddles(v["range"]["throughput_x"], 1.0):
            out[policy] = (f"inconclusive on this box, the {v['repeats']} repeats' req/s margins lie on both sides "
                           f"of 1 ({_x(v, 'throughput_x')}); if real: {why}", cause)
    return out


def document(results: list[ArmResult], opts: PlacementOptions, ports: PortChoice,
             turns: Optional[list[dict]] = None) -> dict[str, Any]:
    profile = TIMING_PROFILES[opts.timing]
    m = margins(results)
    below = explanations(results, m, turns or [], profile)
    return finite({"options": asdict(opts), "ports": ports.to_json(),
                   "timing": {"profile": profile.name, "describe": profile.describe(),
                              "settings": profile.engine_settings()},
                   "arms": [asdict(r) for r in aggregate(results)], "runs": [asdict(r) for r in results], "margins": m,
                   "recommendation": recommend(results, m, opts.workload, profile),
                   "below_one": {p: why for p, (why, _) in below.items()},
                   "causes": {p: v.to_dict() if v else None for p, (_, v) in below.items()}})
