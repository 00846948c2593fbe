"""`p2pctl test stress --generator inference-perf`: llm-d's P2P workload shapes, sent by inference-perf, beside the
fleet's P2P evidence for each pass.

inference-perf sends to one URL, so each shape runs as passes of the same prompts (one seed): a warm pass on the
first engine, then a pass on an engine of every other node, which must pull what the warm pass computed. With
`--via-router`, one pass goes to the router, which places each request. Every pass writes inference-perf's own
output; the run folder gets the toolkit's requests.csv and stages.json from it (so `p2pctl report` and the checks
read it like any stress run) and inference-perf.json: per pass, inference-perf's TTFT/ITL percentiles beside the
P2P loads and KV bytes between snapshots taken around it.

Our own runner stays the default: its ladder, long-document and sustained stages vary concurrency within a run and
name every request's warm node, which inference-perf's fixed concurrency and per-URL passes cannot express.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Optional

from p2p_ops import files
from p2p_ops.errors import BadInput
from p2p_ops.harness import inference_perf
from p2p_ops.harness.basic import snapshot, write_prompts
from p2p_ops.harness.stress import Progress, explain_misses, saved_prompts
from p2p_ops.lifecycle.context import FleetContext
from p2p_ops.observe.records import RequestRecord, write_csv
from p2p_ops.observe.report import p2p_between
from p2p_ops.resources import CHECKOUT, env_path, given_path
from p2p_ops.spec.starter import DEFAULT_MODEL_DIR

RESULT = "inference-perf.json"
VENV_VAR = "P2P_INFERENCE_PERF_VENV"


@dataclass
class InferencePerfOptions:
    shapes: list[str] = field(default_factory=lambda: list(inference_perf.SHAPES))
    scale: str = "local"
    tokenizer: str = ""          # a local Hugging Face folder; "" = the fleet's model folder or models/tiny-llama
    venv: str = ""               # "" = $P2P_INFERENCE_PERF_VENV or this checkout's .venv-inference-perf
    via_router: bool = False
    seed: int = 0
    max_seconds: float = 900.0   # bound on the whole run: a pass gets what is left, and none starts without 10 s
    tag: str = ""

    def validate(self) -> None:
        for s in self.shapes:
            inference_perf.scaled(s, self.scale)   # names the known shapes and scales
        if not self.shapes:
            raise BadInput(f"--shapes: give one or more of {', '.join(inference_perf.SHAPES)}")


def tokenizer_dir(given: str, model: str) -> Path:
    """The tokenizer inference-perf counts lengths with: `given` (--tokenizer), else the fleet's model if it is a
    local folder, else this checkout's tiny model."""
    for candidate in (given, model, str(CHECKOUT / DEFAULT_MODEL_DIR)):
        if candidate and (Path(candidate) / "tokenizer_config.json").is_file():
            return Path(candidate).resolve()
        if candidate and candidate == given:
            raise BadInput(f"--tokenizer {candidate}: not a Hugging Face tokenizer folder (no tokenizer_config.json)")
    raise BadInput("inference-perf needs a local tokenizer folder and downloads none: make one with "
                   f"`p2pctl make-model {DEFAULT_MODEL_DIR}` or pass --tokenizer DIR")


def venv_dir(given: str = "") -> Path:
    """`given`, else $P2P_INFERENCE_PERF_VENV, else this checkout's .venv-inference-perf (relative ones from the
    working directory); one without inference-perf is bad input."""
    venv = given_path(given) if given else env_path(VENV_VAR, CHECKOUT / inference_perf.DEFAULT_VENV)
    if not (venv / "bin" / "inference-perf").is_file():
        raise BadInput(f"{venv}: no inference-perf there; run `make setup-inference-perf` (or "
                       f"scripts/setup_inference_perf.sh {venv}), or set {VENV_VAR}")
    return venv


def passes(ctx: FleetContext, via_router: bool) -> list[tuple[str, str, str]]:
    """(instance, node, url) of each pass: the first engine, then the first engine of every other node; or the
    router alone."""
    if via_router:
        if not ctx.fleet.router.enabled:
            raise BadInput("--via-router: the fleet has no router; set router.enabled: true in the fleet spec")
        return [("router", "router", ctx.fleet.router_url)]
    firsts: dict[str, tuple[str, str, str]] = {}
    for node, inst in ctx.fleet.instances():
        firsts.setdefault(node.name, (inst.id, node.name, ctx.engine_url(node, inst)))
    if len(firsts) < 2:
        raise BadInput("--generator inference-perf pulls across nodes and this fleet has one node; use a fleet of "
                       "two or more nodes, or --via-router")
    return list(firsts.values())


def _max_len(url: str) -> Optional[int]:
    from p2p_ops.endpoints.fetch import get_json

    try:
        body = get_json(f"{url}/v1/models", timeout=5)
        # In tokenizer tokens, so no document Q&A turn is refused by the embedded engine (a vLLM engine counts
        # tokens and is only under-filled by it).
        return int(body["data"][0]["max_model_len"] // inference_perf.ENGINE_UNITS_PER_TOKEN)
    except Exception:  # noqa: BLE001 - an engine that does not say leaves inference-perf's own default
        return None


def run_inference_perf_stress(ctx: FleetContext, opts: InferencePerfOptions, out_dir: Path,
                              progress: Progress = lambda *_: None) -> dict:
    """Every shape's passes; writes inference-perf/<shape>-<k>-<instance>/ (its own output), requests.csv,
    prompts.jsonl, stages.json, inference-perf.json and the before/after snapshots into out_dir."""
    opts.validate()
    targets = passes(ctx, opts.via_router)
    venv, tokenizer = venv_dir(opts.venv), tokenizer_dir(opts.tokenizer, ctx.fleet.model)
    records: list[RequestRecord] = []
    prompts: list[str] = []
    stages, done, stopped = [], [], ""
    t0 = time.monotonic()
    last = snapshot(ctx)   # each pass's P2P evidence is between the snapshot before it and the one after
    files.write_json(out_dir / "status_before.json", last)
    for shape in opts.shapes:
        s = inference_perf.scaled(shape, opts.scale)
        warmer = targets[0][0] if len(targets) > 1 else ""
        wall, n = 0.0, 0
        label = f"{shape} ({opts.scale}): passes on " + ", ".join(t[0] for t in targets)
        for k, (inst, node, url) in enumerate(targets):
            left = t0 + opts.max_seconds - time.monotonic()
            if left < 10:
                stopped = stopped or f"--max-seconds {opts.max_seconds:g} reached before {shape}'s pass {k + 1}"
                break
            stage = f"{shape}-warm" if k == 0 and warmer else shape
            progress(label, k, len(targets))
            start = time.monotonic()
            doc = inference_perf.config(shape, opts.scale, url, ctx.fleet.model,
                                        out_dir / "inference-perf" / f"{shape}-{k}-{inst}", tokenizer,
                                        seed=opts.seed, request_timeout_s=min(600.0, left),
                                        max_model_len=_max_len(url) if s.data_type != "shared_prefix" else None,
                                        api_key=ctx.fleet.api_key)
            entries, summary = inference_perf.read_output(inference_perf.run(venv, doc, left))
            figures = inference_perf.parse_summary(summary, entries)
            # inference-perf's benchmark time, its start-up left out (as bench placement's arms)
            pass_wall = figures.get("benchmark_time_s") or time.monotonic() - start
            before, last = last, snapshot(ctx)
            recs = [replace(r, warmer=warmer, t_start_s=round(r.t_start_s + start - t0, 4))
                    for r in inference_perf.parse_requests(entries, level=s.concurrency, stage=stage, instance=inst,
                                                           node=node, url=url)]
            records += recs
            prompts += [inference_perf.prompt_of(e) for e in sorted(entries, key=lambda e: e["start_time"])]
            if stage == shape:
                wall, n = wall + pass_wall, n + len(recs)
            done.append({"shape": shape, "pass": k, "stage": stage, "instance": inst, "node": node, "url": url,
                         "wall_s": round(pass_wall, 3), "inference_perf": figures,
                         "p2p": p2p_between(before, last).get(inst, {}),
                         "cached_tokens": sum(r.cached_tokens for r in recs),
                         "prompt_tokens": sum(r.prompt_tokens for r in recs)})
            progress(label, k + 1, len(targets))
        stages.append({"name": shape, "level": s.concurrency, "wall_s": wall, "requests": n})
    files.write_json(out_dir / "status_after.json", last)
    write_csv(out_dir / "requests.csv", records)
    rows = saved_prompts(records, prompts)
    write_prompts(out_dir, rows)
    files.write_json(out_dir / RESULT, {"version": inference_perf.VERSION, "scale": opts.scale,
                                        "shapes": {sh: inference_perf.describe(sh, opts.scale) for sh in opts.shapes},
                                        "passes": done})
    meta = {"generator": "inference-perf", "options": asdict(opts), "stages": stages,
            "wall_s": time.monotonic() - t0, "engines": [t[0] for t in targets], "stopped": stopped,
            "explain": explain_misses(ctx, out_dir, rows, progress)}
    files.write_json(out_dir / "stages.json", meta)
    return meta
