"""What every fault scenario shares: what a fault is (`Fault`: inject, hold, restore, cleanup) and the simplest
one (`Kill`: SIGKILL to a unit's process group, started again on restore), closed-loop clients that record each
request, the three phases (before / during / after the fault) and what counts as a failure recompute could have
served."""

from __future__ import annotations

import itertools
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Callable, Optional

from p2p_ops.errors import BadInput
from p2p_ops.harness import load, prompts
from p2p_ops.lifecycle import procs, rejoin, status
from p2p_ops.lifecycle.context import FleetContext
from p2p_ops.observe.records import RequestRecord
from p2p_ops.observe.stats import percentile

Progress = Callable[[str], None]
PHASES = ("before", "during", "after")


@dataclass(frozen=True)
class FaultOptions:
    phase_s: float = 10.0          # load before the fault and after recovery
    hold_s: float = 8.0            # how long the part stays broken
    recover_timeout_s: float = 120.0
    concurrency: int = 2
    doc_chars: int = 1600          # > 4 chunks of 256 byte-tokens: real P2P pulls
    docs: int = 4
    max_tokens: int = 4
    max_requests: int = 2000       # per scenario, hard bound
    request_timeout_s: float = 60.0
    slow_rate_kbit: int = 800      # slow_peer: the holder's egress; a ~3 MB pull then takes ~30 s
    fill_chars: int = 1500         # l1_full: one distinct prompt (byte tokens): ~6 chunks, quick to prefill
    fill_max_requests: int = 400   # l1_full: bound on the prompts sent to fill L1
    fill_timeout_s: float = 240.0  # l1_full: bound on the fill
    drain_timeout_s: float = 15.0

    @classmethod
    def quick(cls) -> "FaultOptions":
        return cls(phase_s=5.0, hold_s=4.0, recover_timeout_s=90.0, docs=3, fill_timeout_s=150.0)


@dataclass
class Figures:
    scenario: str
    part: str                      # what was broken
    sent: int = 0
    failed: int = 0
    failed_by_phase: dict[str, int] = field(default_factory=dict)
    failed_urls: dict[str, int] = field(default_factory=dict)
    sent_by_phase: dict[str, int] = field(default_factory=dict)
    p99_ttft_s: dict[str, Optional[float]] = field(default_factory=dict)
    recovered_after_fault_s: Optional[float] = None
    reregistered_after_restart_s: Optional[float] = None
    recovered: bool = False
    unexpected_failures: int = 0   # failures a recompute could have served (not sent to an unreachable engine)
    retried_resets: int = 0        # requests whose connection was reset before any answer, sent once more
    lookups_inflight_before: Optional[int] = None  # at rest before the fault
    lookups_inflight_max: Optional[int] = None   # LMCache P2P lookups/prefetches/read locks in flight (drain.py)
    lookups_inflight_end: Optional[int] = None
    lookups_drained: Optional[bool] = None
    lookups_drained_after_s: Optional[float] = None
    extra: dict = field(default_factory=dict)    # the scenario's own figures (evictions, timeout, ...)
    skipped: str = ""              # why the scenario did not run on this fleet
    note: str = ""

    def to_json(self) -> dict:
        return asdict(self)


def clients(model: str, opts: FaultOptions, t0: float) -> load.Load:
    """The scenario's requests, recorded: a connection reset before any answer is sent once more
    (`harness.load.Load.send`), and a client whose request failed pauses before its next."""
    return load.Load(model, t0=t0, timeout_s=opts.request_timeout_s, max_tokens=opts.max_tokens, retry_resets=True,
                     pause_after_failure_s=0.2)


def closed_loop(runner: load.Load, jobs: list[tuple[str, str]], opts: FaultOptions, cycle: bool = True,
                stage: str = "") -> load.Workers:
    """`opts.concurrency` clients over the (url, prompt) jobs in turn (again and again with `cycle`), at most
    `opts.max_requests` of them."""
    sent = itertools.islice(itertools.cycle(jobs) if cycle else jobs, opts.max_requests)
    return runner.start(load.jobs_of(load.Job(url, prompt, stage=stage) for url, prompt in sent), opts.concurrency,
                        "fault-load")


@dataclass
class Fault:
    part: str
    unreachable_url: str = ""        # an engine no request can reach while the part is broken
    why_unreachable: str = ""
    restarted: bool = False          # restore() started a process again (re-registration time is a figure)
    extra: dict = field(default_factory=dict)

    def inject(self, runner: load.Load, progress: Progress) -> None: ...

    def hold(self, runner: load.Load, opts: FaultOptions, progress: Progress) -> None:
        time.sleep(opts.hold_s)

    def restore(self, progress: Progress) -> None: ...

    def cleanup(self) -> None:
        """Whatever happens (also an exception): leave nothing broken."""

    def finish(self, marks: dict[str, float], samples: list[RequestRecord]) -> None:
        """After the run: the scenario's own figures into `extra` (marks: fault, restart, recovered times)."""


class Kill(Fault):
    def __init__(self, ctx: FleetContext, node, proc: procs.Proc, dead_engine: str = "") -> None:
        super().__init__(proc.name, dead_engine, "its engine was dead" if dead_engine else "", restarted=True)
        self.ctx, self.node, self.proc = ctx, node, proc
        self.servers = {u.instance.id for u in ctx.units(roles=("server",))
                        if u.instance is not None and ctx.proc(u).name == proc.name}

    def inject(self, runner, progress) -> None:
        [st] = procs.states(self.ctx.conn(self.node), [self.proc])
        if not st.running or st.pid is None:
            raise BadInput(f"{self.proc.name} is {st.state}, not running: start the fleet (`p2pctl up`) "
                           "before a fault test")
        progress(f"killing {self.proc.name}")
        self.ctx.conn(self.node).run(f"kill -KILL -- -{int(st.pid)} 2>/dev/null || kill -KILL {int(st.pid)}",
                                     timeout=15)

    def restore(self, progress) -> None:
        if self.servers:        # its peers must drop their link to the killed server first (lifecycle.rejoin)
            rejoin.wait_forgotten(self.ctx, self.servers, rejoin.forget_deadline_s(self.ctx), progress)
        progress(f"starting {self.proc.name} again")
        procs.start(self.ctx.conn(self.node), self.proc)


def wait_ready(ctx: FleetContext, timeout_s: float) -> Optional[float]:
    """Seconds until the whole fleet reports ready (peers registered, engines healthy and connected)."""
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        if status.report(ctx).ready:
            return time.monotonic() - start
        time.sleep(0.5)
    return None


def shared_jobs(ctx: FleetContext, opts: FaultOptions, seed: int) -> tuple[list[str], list[tuple[str, str]]]:
    """Documents every engine is asked about (a question after each): one warm-up on A, pulls elsewhere."""
    urls = [ctx.engine_url(node, inst) for node, inst in ctx.fleet.instances()]
    docs = [prompts.document(seed, i, opts.doc_chars) for i in range(opts.docs)]
    jobs = [(url, doc + "\n" + prompts.question(seed, i)) for i, doc in enumerate(docs) for url in urls]
    return docs, jobs


def phase_of(s: RequestRecord, marks: dict[str, float]) -> str:
    """A request still in flight when the fault hit belongs to `during`: the fault is what it met."""
    if s.t_end_s < marks.get("fault", float("inf")):
        return "before"
    if s.t_start_s < marks.get("recovered", float("inf")):
        return "during"
    return "after"


def fill_figures(fig: Figures, samples: list[RequestRecord], marks: dict[str, float], unreachable_url: str,
                 why_unreachable: str) -> None:
    fig.sent = len(samples)
    fig.failed = sum(not s.ok for s in samples)
    fig.retried_resets = sum(bool(s.retried) for s in samples)
    for ph in PHASES:
        in_phase = [s for s in samples if phase_of(s, marks) == ph]
        fig.sent_by_phase[ph] = len(in_phase)
        fig.failed_by_phase[ph] = sum(not s.ok for s in in_phase)
        p99 = percentile([s.ttft_s for s in in_phase if s.ok], 99)
        fig.p99_ttft_s[ph] = None if p99 is None else round(p99, 3)
    fig.failed_urls = dict(Counter(s.url for s in samples if not s.ok))
    # Only while the part was broken: afterwards that engine is back and every request must succeed.
    excused = [s for s in samples if not s.ok and unreachable_url and s.url == unreachable_url
               and phase_of(s, marks) == "during"]
    fig.unexpected_failures = fig.failed - len(excused)
    notes = []
    if excused:
        notes.append(f"{len(excused)} request(s) went to {unreachable_url} while {why_unreachable}: nothing can "
                     "serve them there meanwhile (a router would send them to another engine)")
    if fig.unexpected_failures:
        first = next(s for s in samples if not s.ok and s not in excused)
        notes.append(f"{fig.unexpected_failures} request(s) failed where recompute could have served them, "
                     f"first: {first.url}: {first.error}")
    if fig.retried_resets:
        first = next(s for s in samples if s.retried)
        notes.append(f"{fig.retried_resets} request(s) sent once more after a connection reset before any answer, "
                     f"first: {first.url}: {first.retried}")
    if not fig.recovered:
        notes.append("the fleet was not ready again within the recovery timeout")
    if fig.lookups_drained is False:
        notes.append(f"LMCache P2P lookups did not drain: {fig.lookups_inflight_end} still in flight")
    fig.note = "; ".join(notes) or "no failed request"
