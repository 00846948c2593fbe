"""Engines: prefill and decode tokens/s of the embedded CPU engine (and of vLLM on CPU in `make bench`).

Prefill tokens/s = prompt tokens / TTFT of a one-token completion; decode tokens/s = generated tokens
after the first / the time after the first token. Lengths alternate within each repeat.
"""

from __future__ import annotations

import statistics

from bench.suite.procs import engine
from p2p_ops.harness import prompts
from p2p_ops.harness.openai_client import complete
from p2p_ops.resources import CHECKOUT, env_path

PREFILL = {"tiny": [256], "quick": [512, 2048], "full": [512, 2048, 3584]}
REPEATS = {"tiny": 1, "quick": 3, "full": 5}
DECODE_TOKENS = {"tiny": 8, "quick": 32, "full": 64}

def measure(report, url: str, label: str, model: str = "tiny-llm") -> None:
    size = report.size
    t = report.tables.get("engines") or report.table(
        "engines", "Engine speed (medians)", ["engine", "prompt tokens", "prefill tok/s", "TTFT ms",
                                             "decode tok/s", "ms per output token"], plot=None)
    complete(url, model, "warm up", max_tokens=2)
    runs: dict[int, list] = {n: [] for n in PREFILL[size]}
    decode = []
    for r in range(REPEATS[size]):
        for n in PREFILL[size]:
            c = complete(url, model, prompts.document(11, n * 10 + r, n), max_tokens=1)
            if c.ok:
                runs[n].append(c)
        d = complete(url, model, prompts.document(12, r, 64), max_tokens=DECODE_TOKENS[size])
        if d.ok and d.completion_tokens > 1 and d.ttft_s:
            decode.append((d.completion_tokens - 1) / (d.e2e_s - d.ttft_s))
    dec = statistics.median(decode) if decode else float("nan")
    for n, done in runs.items():
        if not done:
            continue
        ttft = statistics.median(c.ttft_s for c in done)
        toks = statistics.median(c.prompt_tokens for c in done)
        report.add_row(t, **{"engine": label, "prompt tokens": int(toks), "prefill tok/s": toks / ttft,
                             "TTFT ms": ttft * 1e3, "decode tok/s": dec, "ms per output token": 1e3 / dec})

def run(report) -> None:
    with engine(report.out_dir) as url:
        measure(report, url, "embedded (CPU, 1 thread)")

def run_vllm(report) -> None:
    """vLLM's CPU build on the tiny local Llama (2 layers, 4 heads of 32: the embedded engine's KV shape).

    Minutes to start on a busy box, so `make bench` only. vLLM runs alone here (no LMCache connector):
    this row is about the engine's own speed.
    """

    from bench.suite.procs import process
    from p2p_ops.harness.local_model import make_model
    from p2p_ops.lifecycle.free_ports import free_port

    venv = env_path("P2P_VLLM_VENV", CHECKOUT / ".venv-vllm")
    python = venv / "bin" / "python"
    if not python.exists():
        report.failed("vllm", f"no vLLM venv at {venv} (make setup-vllm); vLLM engine speed not measured")
        return
    model = make_model(report.out_dir / "tiny-llama")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env_cmd = ["env", "VLLM_NO_USAGE_STATS=1", "HF_HUB_OFFLINE=1", "TRANSFORMERS_OFFLINE=1",
               "VLLM_CPU_KVCACHE_SPACE=1", "VLLM_CPU_OMP_THREADS_BIND=auto"]
    cmd = [*env_cmd, str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
           "--served-model-name", "tiny-llm", "--host", "127.0.0.1", "--port", str(port), "--max-model-len", "4096",
           "--enforce-eager", "--enable-prompt-tokens-details"]
    with process(cmd, url + "/v1/models", report.out_dir / "vllm.log", timeout_s=420):
        measure(report, url, "vLLM CPU (same KV shape)")
