"""Stress a running fleet: a concurrency ladder, long documents, and a sustained mixed load.

Prefixes are first computed ("warmed") on one engine and then queried, by policy, on another node's engine,
so cross-node pulls happen under load. Every request is recorded; every loop is bounded in count and time.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Optional

from p2p_ops import files
from p2p_ops.errors import BadInput
from p2p_ops.harness import prompts
from p2p_ops.harness.basic import explain_request, snapshot, write_prompts
from p2p_ops.harness.load import Job, Load, jobs_of
from p2p_ops.lifecycle.context import FleetContext
from p2p_ops.observe.records import RequestRecord, write_csv

POLICIES = ("other", "round-robin")
STAGES = ("ladder", "longdoc", "sustained")


@dataclass
class StressOptions:
    ladder: list[int] = field(default_factory=lambda: [1, 2, 4, 8, 16, 32])
    requests_per_level: int = 0          # 0: twice the level, at least 4
    doc_tokens: int = 1024               # prefix length of ladder/sustained documents
    max_tokens: int = 8
    policy: str = "other"                # other: never the engine that warmed the prefix's node
    longdoc_tokens: int = 6144
    longdoc_docs: int = 2
    longdoc_queries: int = 2
    longdoc_inflight: int = 1
    sustained_s: float = 30.0
    sustained_concurrency: int = 4
    max_seconds: float = 900.0           # hard bound for the whole run
    max_requests: int = 5000             # hard bound for the whole run
    stages: list[str] = field(default_factory=lambda: list(STAGES))
    tag: str = ""
    seed: int = 0
    via_router: bool = False             # every request goes to the fleet's router, which picks the engine

    @classmethod
    def quick(cls, **kw) -> "StressOptions":
        base = dict(ladder=[1, 2, 4, 8], requests_per_level=0, doc_tokens=768, longdoc_tokens=4096,
                    longdoc_docs=1, longdoc_queries=2, sustained_s=15.0, sustained_concurrency=3)
        return cls(**{**base, **kw})

    def validate(self, n_engines: int) -> None:
        if self.policy not in POLICIES:
            raise BadInput(f"--policy {self.policy}: use one of {', '.join(POLICIES)}")
        unknown = [s for s in self.stages if s not in STAGES]
        if unknown:
            raise BadInput(f"--stages {','.join(unknown)}: unknown; use any of {', '.join(STAGES)}")
        if not self.ladder or any(c < 1 or c > 256 for c in self.ladder):
            raise BadInput("--ladder: concurrency levels must be between 1 and 256, e.g. 1,2,4,8")
        if n_engines < 2 and self.policy == "other":
            raise BadInput("policy 'other' needs at least two engines; use --policy round-robin")
        if self.sustained_s < 0 or self.sustained_s > 3600:
            raise BadInput(f"--sustained {self.sustained_s}: use 0..3600 seconds")


@dataclass
class StageInfo:
    name: str
    level: int
    wall_s: float
    requests: int


Progress = Callable[[str, int, Optional[int]], None]   # (stage label, completed, total or None)


class _Run:
    def __init__(self, ctx: FleetContext, opts: StressOptions, progress: Progress):
        self.ctx, self.opts, self.progress = ctx, opts, progress
        self.engines = [(n, i, ctx.engine_url(n, i)) for n, i in ctx.fleet.instances()]
        self.prompts: list[str] = []          # the prompt of each record, same index
        self.stages: list[StageInfo] = []
        self.load = Load(ctx.fleet.model, max_tokens=opts.max_tokens, on_record=self._recorded)
        self.batch: Optional[tuple[str, int, int]] = None   # (label, records before it, jobs in it)
        self.records = self.load.records
        self.t0 = self.load.t0
        self.deadline = self.t0 + opts.max_seconds
        self.rr = itertools.count()
        self.rng = random.Random(opts.seed)

    def pick(self, warmer_idx: Optional[int]) -> int:
        n = len(self.engines)
        if warmer_idx is None or self.opts.policy == "round-robin":
            return next(self.rr) % n
        warm_node = self.engines[warmer_idx][0].name
        others = [k for k, (node, _, _) in enumerate(self.engines) if node.name != warm_node]
        others = others or [k for k in range(n) if k != warmer_idx]
        return others[next(self.rr) % len(others)]

    def budget_left(self) -> bool:
        return time.monotonic() < self.deadline and len(self.records) < self.opts.max_requests

    def job(self, stage: str, level: int, idx: int, prompt: str, warmer: Optional[int], prefix_id: str) -> Job:
        node, inst, url = self.engines[idx]
        instance, node_name = inst.id, node.name
        if self.opts.via_router:
            # The router picks the engine; the record names the router, not an engine it may not have used.
            url, instance, node_name = self.ctx.fleet.router_url, "router", "router"
        return Job(url, prompt, stage=stage, level=level, instance=instance, node=node_name,
                   warmer=self.engines[warmer][1].id if warmer is not None else "", prefix_id=prefix_id)

    def _recorded(self, job: Job, _: RequestRecord) -> None:
        self.prompts.append(job.prompt)
        if self.batch:
            label, before, total = self.batch
            self.progress(label, len(self.records) - before, total)

    def run_batch(self, label: str, jobs: list[Job], concurrency: int) -> float:
        """Run jobs with `concurrency` in flight (while the run's budget lasts); returns the wall time."""
        self.batch = (label, len(self.records), len(jobs))
        self.progress(label, 0, len(jobs))
        take = jobs_of(jobs)
        wall = self.load.run(lambda i: take(i) if self.budget_left() else None, concurrency, "stress")
        self.batch = None
        return wall

    def doc(self, key: str, tokens: int) -> str:
        # The byte-level engine tokenizer makes characters ~ tokens; vLLM tokenizers give fewer tokens.
        return prompts.document(self.opts.seed, zlib.crc32(key.encode()), tokens)

    def warm(self, stage: str, level: int, docs: list[tuple[str, str]], label: str) -> list[int]:
        """Each (prefix id, document) computed first on an engine in turn; returns the engine of each."""
        warmers = [next(self.rr) % len(self.engines) for _ in docs]
        self.run_batch(label, [self.job(f"{stage}-warm", level, w, d[1] + prompts.question(0, 0), None, d[0])
                               for d, w in zip(docs, warmers)], level)
        return warmers

    def ladder(self) -> None:
        for level in self.opts.ladder:
            if not self.budget_left():
                break
            n = self.opts.requests_per_level or max(4, 2 * level)
            n_docs = max(1, (n + 1) // 2)
            docs = [(f"L{level}-d{d}", self.doc(f"ladder-{self.opts.seed}-{level}-{d}", self.opts.doc_tokens))
                    for d in range(n_docs)]
            warmers = self.warm("ladder", level, docs, f"ladder c={level}: warm {n_docs} prefixes")
            jobs = [self.job("ladder", level, self.pick(w), d[1] + prompts.question(1, k), w, d[0])
                    for k, (d, w) in zip(range(n), itertools.cycle(zip(docs, warmers)))]
            wall = self.run_batch(f"ladder c={level}: {n} requests", jobs, level)
            self.stages.append(StageInfo("ladder", level, wall, n))

    def longdoc(self) -> None:
        o = self.opts
        docs = [(f"D{d}", self.doc(f"longdoc-{o.seed}-{d}", o.longdoc_tokens)) for d in range(o.longdoc_docs)]
        warmers = self.warm("longdoc", o.longdoc_inflight, docs,
                            f"longdoc: warm {len(docs)} docs of ~{o.longdoc_tokens} tokens")
        # Queries interleave documents (like long-doc-qa's "tile" order) so in-flight requests hit several.
        jobs = [self.job("longdoc", o.longdoc_inflight, self.pick(w), d[1] + prompts.question(2, q), w, d[0])
                for q in range(o.longdoc_queries) for d, w in zip(docs, warmers)]
        wall = self.run_batch(f"longdoc: {len(jobs)} queries from another node", jobs, o.longdoc_inflight)
        self.stages.append(StageInfo("longdoc", o.longdoc_inflight, wall, len(jobs)))

    def sustained(self) -> None:
        o = self.opts
        pool = [(f"S{d}", self.doc(f"sustained-{o.seed}-{d}", o.doc_tokens)) for d in range(4)]
        warmers = self.warm("sustained", o.sustained_concurrency, pool, "sustained: warm 4 shared prefixes")
        end = min(time.monotonic() + o.sustained_s, self.deadline)
        counter = itertools.count()
        rng_lock = threading.Lock()
        start = time.monotonic()

        def next_job(_: int) -> Optional[Job]:
            self.progress(f"sustained: {o.sustained_s:.0f} s, {o.sustained_concurrency} in flight",
                          int(time.monotonic() - start), int(o.sustained_s))
            if time.monotonic() >= end or not self.budget_left():
                return None
            with rng_lock:
                k, kind, d = next(counter), self.rng.random(), self.rng.randrange(len(pool))
            if kind < 0.3:   # no shared prefix: computed where it lands
                text = prompts.document(o.seed + 7, 10_000 + k, max(64, o.doc_tokens // 4))
                return self.job("sustained", o.sustained_concurrency, self.pick(None), text, None, "")
            # a prefix first computed on another node
            return self.job("sustained", o.sustained_concurrency, self.pick(warmers[d]),
                            pool[d][1] + prompts.question(3, k), warmers[d], pool[d][0])

        wall = self.load.run(next_job, o.sustained_concurrency, "stress-sustained")
        n = sum(1 for r in self.records if r.stage == "sustained")
        self.stages.append(StageInfo("sustained", o.sustained_concurrency, wall, n))


# explain is read-only but not free (LMCache's hasher on every node, the directory): a few misses tell the story.
EXPLAIN_AT_MOST = 3


def saved_prompts(records: list[RequestRecord], prompts: list[str]) -> list[dict]:
    """prompts.jsonl: one row per request (its requests.csv row number from 1), `missed` when a cross-node
    request got no cached token (it failed "served from cache")."""
    return [{"request": i + 1, "stage": r.stage, "instance": r.instance, "node": r.node, "computed_on": r.warmer,
             "prefix_id": r.prefix_id, "missed": r.ok and r.cross_node and r.cached_tokens == 0,
             "cached_tokens": r.cached_tokens, "prompt_tokens": r.prompt_tokens, "prompt": text}
            for i, (r, text) in enumerate(zip(records, prompts))]


def explain_misses(ctx: FleetContext, out_dir: Path, rows: list[dict], progress: Progress) -> list[dict]:
    """explain's verdict for the first missed request of each stage (at most EXPLAIN_AT_MOST), saved in
    explain.json; [] when every cross-node request was served from cache."""
    missed = [r for r in rows if r["missed"] and r["instance"] != "router"]
    first = [next(r for r in missed if r["stage"] == st) for st in dict.fromkeys(r["stage"] for r in missed)]
    out = []
    for row in first[:EXPLAIN_AT_MOST]:
        progress(f"explain request {row['request']} ({row['stage']} on {row['instance']})", 0, None)
        found, ex = explain_request(ctx, out_dir, row["request"], row["prompt"], row["computed_on"],
                                    row["instance"])
        out.append({"request": row["request"], **found} if ex is None else
                   {"request": row["request"], "stage": row["stage"], **found, "explanation": ex.to_dict()})
    if out:
        files.write_json(out_dir / "explain.json", out)
    return [{k: v for k, v in e.items() if k != "explanation"} for e in out]


def run_stress(ctx: FleetContext, opts: StressOptions, out_dir: Path, progress: Progress = lambda *_: None) -> dict:
    """Run the stages, write requests.csv, stages.json and the before/after snapshots into out_dir."""
    run = _Run(ctx, opts, progress)
    opts.validate(len(run.engines))
    if opts.via_router and not ctx.fleet.router.enabled:
        raise BadInput("--via-router: the fleet has no router; set router.enabled: true in the fleet spec")
    files.write_json(out_dir / "status_before.json", snapshot(ctx))
    for stage in opts.stages:
        if not run.budget_left():
            break
        getattr(run, stage)()
    files.write_json(out_dir / "status_after.json", snapshot(ctx))
    write_csv(out_dir / "requests.csv", run.records)
    rows = saved_prompts(run.records, run.prompts)
    write_prompts(out_dir, rows)
    meta = {"options": asdict(opts), "stages": [asdict(s) for s in run.stages],
            "wall_s": time.monotonic() - run.t0, "engines": [i.id for _, i, _ in run.engines],
            "explain": explain_misses(ctx, out_dir, rows, progress)}
    files.write_json(out_dir / "stages.json", meta)
    return meta
