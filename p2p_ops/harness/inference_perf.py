"""kubernetes-sigs' inference-perf (the load generator llm-d publishes its P2P figures with) run against a fleet's
engines or router, with llm-d's three P2P workload shapes, and its output read back as this toolkit's records.

inference-perf lives in a venv of its own (`scripts/setup_inference_perf.sh`, Python >= 3.12). What it can say:
- shared-prefix pool and hot set: `data.type: shared_prefix` (groups of prompts sharing one prefix, each prompt
  sent once per pass, in a seeded shuffle);
- document Q&A: `data.type: conversation_replay` (one per-conversation document as the system prompt, then turns
  sent in order, each carrying the document and the history so far).
Lengths are in the tokens of the tokenizer it is given (a local Hugging Face folder; it downloads nothing here), not
in the engine's own: the embedded engine counts bytes, about twice as many. Its per-request output names no shape
group and no instance: `prefix_id` is a hash of a prompt's first characters (inside the shared prefix, whose floor
is PREFIX_FLOOR tokens) and `instance` is what the caller says it targeted ("" behind a router).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path

from p2p_ops import files
from p2p_ops.connectors.base import tail
from p2p_ops.errors import BadInput, CouldNotRun
from p2p_ops.observe.records import RequestRecord

VERSION = "0.7.0"
DEFAULT_VENV = ".venv-inference-perf"
PER_REQUEST = "per_request_lifecycle_metrics.json"
SUMMARY = "summary_lifecycle_metrics.json"
PREFIX_CHARS = 32      # characters hashed into prefix_id: always inside a prefix of PREFIX_FLOOR tokens
PREFIX_FLOOR = 64      # fewest prefix/document tokens a scale leaves
LENGTH_FLOOR = 2       # fewest question/output tokens (inference-perf times TTFT only with 2+ output tokens)
# The embedded engine counts bytes, about two per tokenizer token: what converts a length between the two.
ENGINE_UNITS_PER_TOKEN = 2
READ_CAP = 256 << 20   # per-request output holds every prompt: ~2x the prompt tokens in bytes


@dataclass(frozen=True)
class Shape:
    name: str
    data_type: str          # inference-perf's data.type that expresses it
    prefixes: int           # shared prefixes (document Q&A: conversations, each with its own document)
    prefix_tokens: int
    questions: int          # requests per prefix (document Q&A: turns per conversation)
    question_tokens: int
    output_tokens: int
    concurrency: int
    ours: tuple[str, ...]   # the fields llm-d's P2P guide does not fix: this toolkit's choice


SHAPES = {s.name: s for s in (
    Shape("shared-prefix-pool", "shared_prefix", 128, 48_000, 4, 256, 64, 64, ("questions", "concurrency")),
    Shape("hot-set", "shared_prefix", 8, 48_000, 16, 256, 512, 64,
          ("prefix_tokens", "questions", "question_tokens", "concurrency")),
    Shape("document-qa", "conversation_replay", 192, 48_000, 6, 256, 64, 128, ("question_tokens", "output_tokens")),
)}


@dataclass(frozen=True)
class Scale:
    """Factors onto a smaller fleet: `prefix` multiplies the prefix/document length (what P2P moves), `tail` the
    question and output lengths, `counts` the number of prefixes or conversations and the concurrency. Questions
    per prefix (turns per conversation) stay. Each figure is rounded, then floored (PREFIX_FLOOR, LENGTH_FLOOR, 1)."""
    name: str
    prefix: float
    tail: float
    counts: float


SCALES = {s.name: s for s in (Scale("llm-d", 1, 1, 1), Scale("local", 1 / 64, 1 / 8, 1 / 16),
                              Scale("smoke", 1 / 256, 1 / 32, 1 / 64))}


def scaled(shape: str, scale: str) -> Shape:
    """`shape` at the named `scale` (a report keeps the name: `describe`)."""
    if shape not in SHAPES or scale not in SCALES:
        raise BadInput(f"unknown inference-perf shape {shape!r} or scale {scale!r}; shapes: {', '.join(SHAPES)}; "
                       f"scales: {', '.join(SCALES)}")
    s, f = SHAPES[shape], SCALES[scale]
    return replace(s, prefixes=max(1, round(s.prefixes * f.counts)),
                   prefix_tokens=max(PREFIX_FLOOR, round(s.prefix_tokens * f.prefix)),
                   question_tokens=max(LENGTH_FLOOR, round(s.question_tokens * f.tail)),
                   output_tokens=max(LENGTH_FLOOR, round(s.output_tokens * f.tail)),
                   concurrency=max(1, round(s.concurrency * f.counts)))


def describe(shape: str, scale: str) -> dict:
    """What a report states: the shape, the scale's name and factors, llm-d's figures and the ones sent."""
    s = scaled(shape, scale)
    return {"shape": shape, "scale": vars(SCALES[scale]), "llm_d": vars(SHAPES[shape]), "sent": vars(s),
            "requests": s.prefixes * s.questions}


def _fixed(v: int) -> dict:
    return {"type": "fixed", "mean": v, "min": v, "max": v, "std_dev": 0}


def config(shape: str | Shape, scale: str, base_url: str, model: str, out_dir: str | Path, tokenizer: str | Path, *,
           seed: int = 1234, request_timeout_s: float = 600.0, max_model_len: int | None = None,
           api_key: str = "", session_header: str = "") -> dict:
    """inference-perf's config for one pass of `shape` at `scale` (or of a Shape of the caller's own, as sized)
    against `base_url` (an engine or the router, without /v1): streamed /v1/completions, one concurrent stage, the
    per-request report with its computed TTFT/ITL and the prompt (for prefix_id), without the response bodies.
    `tokenizer` is a local folder. `max_model_len` (tokenizer tokens) bounds document Q&A's growing history;
    `session_header` names the header that carries each conversation's id (what a router's session policies hash)."""
    s = shape if isinstance(shape, Shape) else scaled(shape, scale)
    data: dict = {"type": s.data_type}
    if s.data_type == "shared_prefix":
        data["shared_prefix"] = {"num_groups": s.prefixes, "num_prompts_per_group": s.questions,
                                 "system_prompt_len": s.prefix_tokens, "question_len": s.question_tokens,
                                 "output_len": s.output_tokens, "seed": seed}
    else:
        data["conversation_replay"] = {
            "seed": seed, "num_conversations": s.prefixes, "shared_system_prompt_len": 0,
            "dynamic_system_prompt_len": _fixed(s.prefix_tokens), "turns_per_conversation": _fixed(s.questions),
            "input_tokens_per_turn": _fixed(s.question_tokens), "output_tokens_per_turn": _fixed(s.output_tokens),
            **({"max_model_len": max_model_len} if max_model_len else {})}
    server = {"type": "vllm", "model_name": model, "base_url": base_url.rstrip("/"), "ignore_eos": True}
    if api_key:
        server["api_key"] = api_key
    fields = {"request": True, "response": False, "info": True, "response_chunks": False, "computed_metrics": True}
    return {
        "api": {"type": "completion", "streaming": True,
                **({"session_id_header_key": session_header} if session_header else {})},
        "server": server,
        "tokenizer": {"pretrained_model_name_or_path": str(tokenizer)},
        "data": data,
        "load": {"type": "concurrent", "base_seed": seed, "request_timeout": request_timeout_s,
                 "num_workers": max(1, min(8, s.concurrency // 16)),
                 "stages": [{"num_requests": s.prefixes * s.questions, "concurrency_level": s.concurrency}]},
        "report": {"request_lifecycle": {"summary": True, "per_stage": False, "per_request": True,
                                         "per_request_fields": fields, "percentiles": [50, 90, 95, 99]},
                   "prometheus": None},
        "storage": {"local_storage": {"path": str(out_dir)}},
    }


def prompt_of(entry: dict) -> str:
    """The prompt a per-request entry sent ("" when the report left requests out)."""
    return files.parse_json(entry.get("request") or "{}", "inference-perf request").get("prompt") or ""


def _prefix_id(entry: dict) -> str:
    prompt = prompt_of(entry)
    return "p" + hashlib.sha1(prompt[:PREFIX_CHARS].encode()).hexdigest()[:10] if prompt else ""


def _usage(entry: dict) -> dict:
    return (((entry.get("info") or {}).get("response_metrics") or {}).get("server_usage")) or {}


def parse_requests(entries: list, *, level: int, stage: str = "inference-perf", instance: str = "",
                   node: str = "", url: str = "") -> list[RequestRecord]:
    """inference-perf's per-request entries as records, by start time, t_start_s from the first start. prompt and
    output tokens are the server's usage (inference-perf's own count when the server gave none), cached_tokens
    its usage.prompt_tokens_details.cached_tokens (0 when absent), ttft_s inference-perf's computed TTFT (None
    unless streamed with 2+ tokens). `warmer`: the instance of a prefix's first record ("" behind a router)."""
    entries = sorted(entries, key=lambda e: e["start_time"])
    t0 = entries[0]["start_time"] if entries else 0.0
    out, warmers = [], {}
    for e in entries:
        usage, info, err = _usage(e), e.get("info") or {}, e.get("error")
        computed = e.get("computed_metrics") or {}
        prefix = _prefix_id(e)
        warmer = warmers.setdefault(prefix, instance) if prefix else ""
        prompt = usage.get("prompt_tokens", ((info.get("request_metrics") or {}).get("text") or {}).get("input_tokens"))
        output = usage.get("completion_tokens", (info.get("response_metrics") or {}).get("output_tokens"))
        out.append(RequestRecord(
            stage=stage, level=level, instance=instance, node=node, warmer=warmer, prefix_id=prefix,
            t_start_s=round(e["start_time"] - t0, 4), prompt_tokens=int(prompt or 0),
            cached_tokens=int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0),
            output_tokens=int(output or 0), ttft_s=computed.get("time_to_first_token"),
            e2e_s=round(e["end_time"] - e["start_time"], 6), ok=err is None,
            error="" if err is None else f"{err.get('error_type', '')}: {err.get('error_msg', '')}".strip(": "),
            url=url))
    return out


def parse_summary(summary: dict, entries: list = ()) -> dict:
    """inference-perf's own figures from its summary report, as it reports them (seconds; mean, min, max, median
    and the configured percentiles): TTFT, ITL (over all token gaps), TPOT and request latency; its prompt-token
    totals with the cached split; and how many per-request entries carried a cached-token count at all."""
    ok, failed = summary.get("successes") or {}, summary.get("failures") or {}
    latency, prompt = ok.get("latency") or {}, ok.get("prompt_tokens") or {}
    return {
        "requests": ok.get("count", 0) + failed.get("count", 0), "failed": failed.get("count", 0),
        "benchmark_time_s": summary.get("benchmark_time_seconds"),
        "ttft_s": latency.get("time_to_first_token"), "itl_s": latency.get("inter_token_latency"),
        "tpot_s": latency.get("time_per_output_token"), "e2e_s": latency.get("request_latency"),
        "prompt_tokens": prompt.get("total"), "cached_tokens": prompt.get("cached"),
        "requests_reporting_cached": sum((_usage(e).get("prompt_tokens_details") or {}).get("cached_tokens")
                                         is not None for e in entries),
        "throughput": ok.get("throughput"),
    }


def read_output(out_dir: Path) -> tuple[list, dict]:
    """The per-request entries and the summary report inference-perf wrote into `out_dir`."""
    fix = "not inference-perf's output: rerun it"
    return (files.read_json(out_dir / PER_REQUEST, READ_CAP, fix, within=out_dir),
            files.read_json(out_dir / SUMMARY, fix=fix, within=out_dir))


def run(venv: str | Path, doc: dict, timeout_s: float) -> Path:
    """Write `doc` beside the output and run inference-perf on it (offline: the tokenizer is a local folder);
    its own output goes to inference-perf.log. A missing venv, a timeout or a non-zero exit is CouldNotRun
    naming the command, the exit code and the output's tail. Returns the output folder."""
    out_dir = files.make_dirs(doc["storage"]["local_storage"]["path"])
    cfg = files.write_json(out_dir / "inference-perf-config.yaml", doc)  # JSON is YAML
    cmd = [str(Path(venv) / "bin" / "inference-perf"), "--config_file", str(cfg), "--log-level", "WARNING"]
    try:
        _run(cmd, out_dir, timeout_s)
    finally:
        if doc["server"].get("api_key"):  # the fleet's key is not kept in a run folder
            files.write_json(cfg, {**doc, "server": {**doc["server"], "api_key": "<redacted>"}})
    return out_dir


def _run(cmd: list[str], out_dir: Path, timeout_s: float) -> None:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", DO_NOT_TRACK="1")
    try:
        proc = subprocess.Popen(cmd, cwd=out_dir, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
    except FileNotFoundError:
        raise CouldNotRun(f"{cmd[0]} not found: run `make setup-inference-perf` (scripts/setup_inference_perf.sh "
                          f"{Path(cmd[0]).parent.parent})") from None
    try:
        output, _ = proc.communicate(timeout=timeout_s)
        failed = f"exited {proc.returncode}" if proc.returncode else ""
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):  # its worker processes too: the group started here
            os.killpg(proc.pid, signal.SIGKILL)
        output, failed = proc.communicate()[0], f"did not finish within {timeout_s:.0f} s"
    files.write_text(out_dir / "inference-perf.log", output)
    if failed:
        raise CouldNotRun(f"{' '.join(cmd)} {failed}:\n{tail(output)}")
