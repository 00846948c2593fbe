"""The load generator's own cost, so its figures can be trusted.

1. Against instant_server.py (answers at once): how many requests/s the harness client
   (p2p_ops.harness.load, the runner every load of the harness uses) can drive per level of
   concurrency, and the latency it adds per request.
2. Against a real embedded engine under a short concurrency ladder: the client's TTFT next to the
   engine's own TTFT histogram (vllm:time_to_first_token_seconds, sum/count deltas per level).
"""

from __future__ import annotations

import statistics
import sys

import requests

from bench.suite.procs import engine, process
from p2p_ops.harness import prompts
from p2p_ops.harness.load import Job, Load, jobs_of
from p2p_ops.lifecycle.free_ports import free_port
from p2p_ops.observe.records import RequestRecord
from p2p_ops.observe.stats import percentile

LEVELS = {"tiny": [1, 2], "quick": [1, 4, 16], "full": [1, 4, 16, 64]}
REQUESTS = {"tiny": 20, "quick": 300, "full": 1000}
LADDER = {"tiny": [1], "quick": [1, 2, 4], "full": [1, 2, 4, 8]}
LADDER_REQUESTS = {"tiny": 3, "quick": 12, "full": 24}
PROMPT_TOKENS = {"tiny": 128, "quick": 1024, "full": 1024}


def drive(url: str, n: int, concurrency: int, prompt, max_tokens: int = 1) -> tuple[float, list[RequestRecord]]:
    """n requests at this concurrency on the harness's load runner; returns (wall seconds, records)."""
    load = Load("tiny-llm", max_tokens=max_tokens)
    wall = load.run(jobs_of(Job(url, prompt(i)) for i in range(n)), concurrency, "loadgen")
    return wall, load.records


def _ttft_sum_count(url: str) -> tuple[float, float]:
    from p2p_ops.endpoints.metrics_api import parse_metrics

    total = count = 0.0
    for name, _, value in parse_metrics(requests.get(url + "/metrics", timeout=10).text):
        if name == "vllm:time_to_first_token_seconds_sum":
            total += value
        elif name == "vllm:time_to_first_token_seconds_count":
            count += value
    return total, count


def run(report) -> None:
    size = report.size
    t = report.table("loadgen_client", "Load generator against an instant server (client cost alone)",
                     ["concurrency", "requests", "req/s", "latency p50 ms", "latency p99 ms", "errors"],
                     plot=("concurrency", ["req/s"], "requests/s", False))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "bench.suite.instant_server", str(port)]
    with process(cmd, url + "/v1/models", report.out_dir / "instant_server.log", timeout_s=30):
        drive(url, 20, 2, lambda i: "warm")
        for c in LEVELS[size]:
            wall, done = drive(url, REQUESTS[size], c, lambda i: "hello")
            lat = [d.e2e_s * 1e3 for d in done if d.ok]
            report.add_row(t, **{"concurrency": c, "requests": len(done), "req/s": len(done) / wall,
                                 "latency p50 ms": percentile(lat, 50), "latency p99 ms": percentile(lat, 99),
                                 "errors": sum(not d.ok for d in done)})
    floor = (t.rows[0]["latency p50 ms"] if t.rows else None) or float("nan")
    report.facts["client_floor_ms"] = floor

    e = report.table("loadgen_ttft", "Client TTFT vs the engine's own TTFT histogram (means, ms)",
                     ["concurrency", "requests", "client TTFT ms", "engine TTFT ms", "overhead ms", "overhead %"],
                     plot=("concurrency", ["client TTFT ms", "engine TTFT ms"], "ms", False))
    n_tok = PROMPT_TOKENS[size]
    with engine(report.out_dir) as url:
        drive(url, 2, 1, lambda i: prompts.document(7, 10_000 + i, n_tok))
        for c in LADDER[size]:
            before = _ttft_sum_count(url)
            _, done = drive(url, LADDER_REQUESTS[size], c, lambda i, c=c: prompts.document(7, c * 1000 + i, n_tok))
            after = _ttft_sum_count(url)
            ok = [d for d in done if d.ok]
            client = statistics.fmean(d.ttft_s for d in ok) * 1e3 if ok else float("nan")
            count = after[1] - before[1]
            eng = (after[0] - before[0]) / count * 1e3 if count else float("nan")
            report.add_row(e, **{"concurrency": c, "requests": len(ok), "client TTFT ms": client,
                                 "engine TTFT ms": eng, "overhead ms": client - eng,
                                 "overhead %": (client - eng) / client * 100 if client else float("nan")})
    # The client's own cost is what it adds against a server that answers at once; the gap between
    # client and engine TTFT also holds the engine's HTTP front end (parse, tokenize before its clock
    # starts, the hand-off of the first token to the event loop), so it is shown, not judged.
    eng1 = e.rows[0]["engine TTFT ms"] if e.rows else float("nan")
    own = floor / eng1 * 100 if eng1 else float("nan")
    gap = max((r["overhead %"] for r in e.rows), default=float("nan"))
    report.target("load generator overhead", "< 5 % of TTFT", f"{own:.1f} % ({floor:.1f} ms of {eng1:.0f} ms)",
                  own < 5, f"client-side vs engine TTFT differ by up to {gap:.1f} %, which also counts the engine's "
                  "HTTP front end")
