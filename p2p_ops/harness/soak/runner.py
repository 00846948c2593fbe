"""Run a soak on a healthy fleet: a steady mixed load for `duration_s`, samples of every process meanwhile, a
cross-node proof every `proof_every_s`; then the load stops, LMCache's in-flight P2P work must drain, and the
checks are made (leaks.py). `stop()` is asked once a second: a `down` of the fleet ends the run early."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from p2p_ops.errors import BadInput
from p2p_ops.harness.basic import run_basic
from p2p_ops.harness.faults import drain
from p2p_ops.harness.faults.core import Progress, wait_ready
from p2p_ops.harness.soak.load import L1Filler, MixedLoad
from p2p_ops.harness.soak.options import SoakOptions
from p2p_ops.harness.soak.sampler import Sampler
from p2p_ops.lifecycle.context import FleetContext
from p2p_ops.observe.stats import percentile

NOTE_EVERY_S = 60.0


@dataclass
class Proof:
    t: float
    passed: bool
    detail: str


@dataclass
class Soaked:
    """What the run recorded; leaks.py judges it and shows it (soak.md, soak.json, the plots)."""

    opts: SoakOptions
    load: MixedLoad
    sampler: Sampler
    proofs: list[Proof] = field(default_factory=list)
    wall_s: float = 0.0
    stopped_early: str = ""
    drained: Optional[drain.DrainFigures] = None
    inflight_at_rest_before: int = 0
    filler: Optional[L1Filler] = None


def _proof(ctx: FleetContext, out_dir: Path, t: float, n: int) -> Proof:
    try:
        res = run_basic(ctx, out_dir=out_dir / "proofs" / f"{n:02d}", max_tokens=8)
    except Exception as exc:  # noqa: BLE001 - a proof that cannot run under the load is a failed proof
        return Proof(round(t, 1), False, f"{type(exc).__name__}: {str(exc)[:200]}")
    failed = [c.name for c in res.checks if not c.ok]
    return Proof(round(t, 1), res.passed, "; ".join(failed) or
                 f"{res.numbers.get('cached_tokens_b')} tokens from {res.a}'s cache on {res.b}")


def _note(s: Soaked, t: float) -> str:
    reqs = [r for r in s.load.snapshot() if r.stage != "warm"]
    recent = [r.ttft_s for r in reqs if r.ok and r.ttft_s is not None and r.t_start_s >= t - NOTE_EVERY_S]
    p99 = percentile(recent, 99)
    servers = [r for r in s.sampler.rows[-len(s.sampler.units):] if r.role == "server" and r.anon_mib]
    mem = ", ".join(f"{r.unit.split('/')[0]} {r.anon_mib:.0f} MiB" for r in servers)
    return (f"soak {t / 60:.1f} of {s.opts.duration_s / 60:.1f} min: {len(reqs)} requests, "
            f"{sum(not r.ok for r in reqs)} failed, p99 TTFT last minute "
            f"{'-' if p99 is None else f'{p99 * 1000:.0f} ms'}; servers {mem or '-'}")


def _loop(ctx: FleetContext, s: Soaked, out_dir: Path, t0: float, progress: Progress,
          stop: Callable[[], Optional[str]]) -> None:
    next_proof, next_note = s.opts.proof_every_s, NOTE_EVERY_S
    while (t := time.monotonic() - t0) < s.opts.duration_s:
        if why := stop():
            s.stopped_early = why
            progress(f"soak stopped early: {why}")
            return
        if s.sampler.due():
            s.sampler.take()
        if t >= next_proof:
            s.proofs.append(_proof(ctx, out_dir, t, len(s.proofs)))
            progress(f"cross-node proof at {t:.0f} s: {'PASS' if s.proofs[-1].passed else 'FAIL'} "
                     f"({s.proofs[-1].detail})")
            next_proof += s.opts.proof_every_s
        if t >= next_note:
            progress(_note(s, t))
            next_note += NOTE_EVERY_S
        time.sleep(0.5)


def run_soak(ctx: FleetContext, opts: SoakOptions, out_dir: Path, progress: Progress = lambda _: None,
             stop: Callable[[], Optional[str]] = lambda: None) -> Soaked:
    opts.validate()
    if opts.via_router and not ctx.fleet.router.enabled:
        raise BadInput("--via-router: the fleet has no router; set router.enabled: true in the fleet spec")
    if wait_ready(ctx, 120) is None:
        raise BadInput(f"fleet {ctx.fleet.name} is not ready (`p2pctl status`); a soak needs a healthy fleet")
    urls = [ctx.engine_url(n, i) for n, i in ctx.fleet.instances()]
    t0 = time.monotonic()
    load = MixedLoad(urls, ctx.fleet.model, opts, t0, ctx.fleet.router_url if opts.via_router else None)
    s = Soaked(opts, load, Sampler(ctx, t0, opts.sample_every_s))
    s.inflight_at_rest_before = drain.total(drain.snapshot(ctx))
    s.sampler.take()
    load.warm()
    progress(f"soak: {opts.concurrency} client(s) for {opts.duration_s / 60:.1f} min on {len(urls)} engine(s)"
             f"{' through the router' if opts.via_router else ''}; warm-up {opts.warmup_s:.0f} s")
    clients = load.start()
    if opts.fill_l1:
        s.filler = L1Filler(ctx, load, opts.warmup_s * 0.9).start()
    try:
        _loop(ctx, s, out_dir, t0, progress, stop)
    finally:
        if s.filler:
            s.filler.stop()
        clients.stop()
        s.wall_s = round(time.monotonic() - t0, 1)
    if not s.stopped_early:
        s.drained = drain.wait_drained(ctx, 0, drain.lookup_timeout_s(ctx) + 5, s.inflight_at_rest_before)
        s.sampler.take()
    return s
