"""Run the real `lmcache bench engine --workload long-doc-qa` against a fleet engine and keep its output.

The bench sizes its workload from a KV volume: documents = volume_gb x tokens_per_gb / document_length.
We give it the engine's true tokens-per-GB (from the fleet's model shape) so it never needs to download a
tokenizer or query a server to guess it.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Callable, Optional

from p2p_ops import files
from p2p_ops.errors import CouldNotRun
from p2p_ops.lifecycle.context import FleetContext
from p2p_ops.lifecycle.render import bin_dir_for


def tokens_per_gb(fleet) -> int:
    e = fleet.engine
    bytes_per_token = 2 * e.num_layers * e.num_heads * e.head_size * 4  # K and V, float32
    return max(1, (1 << 30) // bytes_per_token)


def run_lmcache_bench(ctx: FleetContext, out_dir: Path, quick: bool = False, document_length: Optional[int] = None,
                      num_documents: Optional[int] = None, queries: int = 2, inflight: int = 2, max_tokens: int = 8,
                      timeout: float = 900.0, progress: Callable[[str], None] = lambda _: None) -> dict:
    files.make_dirs(out_dir)
    node, inst = ctx.fleet.instances()[0]
    document_length = document_length or (1024 if quick else 4096)
    num_documents = num_documents or (2 if quick else 4)
    tpg = tokens_per_gb(ctx.fleet)
    cmd = [str(Path(bin_dir_for(ctx.fleet.nodes[0])) / "lmcache"), "bench", "engine",
           "--engine-url", ctx.engine_url(node, inst), "--model", ctx.fleet.model, "--workload", "long-doc-qa",
           "--tokens-per-gb-kvcache", str(tpg), "--kv-cache-volume", f"{num_documents * document_length / tpg:.9f}",
           "--ldqa-document-length", str(document_length), "--ldqa-query-per-document", str(queries),
           "--ldqa-num-inflight-requests", str(inflight), "--ldqa-max-output-length", str(max_tokens),
           "--no-interactive", "--json", "--output-dir", str(out_dir), "-q"]
    progress(f"lmcache bench engine long-doc-qa against {inst.id}: {num_documents} documents of "
             f"{document_length} tokens, {queries} queries each, {inflight} in flight")
    env = dict(os.environ, LMCACHE_TRACK_USAGE="false", DO_NOT_TRACK="1", LMCACHE_DISABLE_BANNER="1",
               PYTHONWARNINGS="ignore")
    try:
        res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise CouldNotRun(f"{cmd[0]} not found: run `make setup`") from None
    except subprocess.TimeoutExpired:
        raise CouldNotRun(f"lmcache bench did not finish within {timeout:.0f} s") from None
    files.write_text(out_dir / "bench.log", res.stdout + "\n" + res.stderr)
    summary_file = out_dir / "bench_summary.json"
    results = json.loads(files.read_text(summary_file, within=out_dir))["results"] if summary_file.is_file() else {}
    result = {"command": cmd, "exit_code": res.returncode, "instance": inst.id,
              "completed": results.get("successful_requests", 0),
              "failed": results.get("failed_requests", 0 if results else None),
              **{k: results.get(k) for k in ("p50_ttft_ms", "p99_ttft_ms", "input_throughput")},
              "elapsed_s": results.get("elapsed_time")}
    if res.returncode != 0 and result["failed"] is None:
        result["failed"] = -1
        result["error"] = (res.stderr or res.stdout)[-1500:]
    files.write_json(out_dir / "result.json", result)
    return result
