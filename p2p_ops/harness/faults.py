"""Faults with figures: break one part of a running fleet under load, bring it back, and measure.

Each scenario runs the same bounded shape on a healthy fleet:

    warm     every shared document is computed once on the first engine (so other nodes pull it over P2P)
    before   `phase_s` of load: clients query the documents on every engine
    fault    the scenario's part is killed (SIGKILL to its process group: no clean shutdown)
    during   load goes on for `hold_s`; then the part is started again (same pidfile, wrapper and ports)
    after    load until the fleet is ready again (all peers registered, engines healthy and connected), then
             `phase_s` more

Figures per scenario: requests sent and failed (per phase, and where the failures went), p99 TTFT before,
during and after, and the seconds from the fault (and from the restart) until every peer was registered
again. Every loop is bounded in time and request count. Scenarios (`SCENARIOS`):

- peer_server_killed: node B's lmcache server; B's engine must fall back to recompute, A's server loses a
  peer. Requests to B's engine must still succeed (recompute serves them).
- coordinator_restart: the coordinator; servers keep serving from their last membership, re-register when it
  is back.
- engine_killed: node B's engine; requests sent to it fail while it is down (nothing can serve them there; a
  router would send them elsewhere). Requests to other engines must still succeed.

Not covered here (yet): L1 full, a cut link and a slow peer between netns hosts (they need the root testbed).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Optional

from p2p_ops import fleet_status, procs
from p2p_ops.context import FleetContext
from p2p_ops.errors import BadInput
from p2p_ops.harness import prompts
from p2p_ops.harness.openai_client import complete
from p2p_ops.stats import percentile

Progress = Callable[[str], None]


@dataclass(frozen=True)
class FaultOptions:
    phase_s: float = 10.0          # load before the fault and after recovery
    hold_s: float = 8.0            # how long the part stays dead
    recover_timeout_s: float = 120.0
    concurrency: int = 2
    doc_chars: int = 1600          # > 4 chunks of 256 byte-tokens: real P2P pulls
    docs: int = 4
    max_tokens: int = 4
    max_requests: int = 2000       # per scenario, hard bound
    request_timeout_s: float = 60.0

    @classmethod
    def quick(cls) -> "FaultOptions":
        return cls(phase_s=5.0, hold_s=4.0, recover_timeout_s=90.0, docs=3)


@dataclass
class Sample:
    t: float                       # seconds since the scenario's start, when the request was sent
    url: str
    ok: bool
    ttft_s: Optional[float]
    cached_tokens: int
    error: str = ""
    t_end: float = 0.0             # when the answer (or the error) came back


@dataclass
class Figures:
    scenario: str
    part: str                      # the process that was killed
    sent: int = 0
    failed: int = 0
    failed_by_phase: dict[str, int] = field(default_factory=dict)
    failed_urls: dict[str, int] = field(default_factory=dict)
    sent_by_phase: dict[str, int] = field(default_factory=dict)
    p99_ttft_s: dict[str, Optional[float]] = field(default_factory=dict)
    recovered_after_fault_s: Optional[float] = None
    reregistered_after_restart_s: Optional[float] = None
    recovered: bool = False
    unexpected_failures: int = 0   # failures a recompute could have served (not sent to a dead engine)
    note: str = ""

    def to_json(self) -> dict:
        return asdict(self)


class _Load:
    """Closed-loop clients over a fixed set of (url, prompt) jobs, recording every request."""

    def __init__(self, jobs: list[tuple[str, str]], model: str, opts: FaultOptions, t0: float) -> None:
        self.jobs, self.model, self.opts, self.t0 = jobs, model, opts, t0
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._next = 0
        self._threads = [threading.Thread(target=self._run, daemon=True, name=f"fault-load-{i}")
                         for i in range(opts.concurrency)]

    def start(self) -> "_Load":
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=self.opts.request_timeout_s + 5)

    def _take(self) -> Optional[tuple[str, str]]:
        with self._lock:
            if self._stop.is_set() or self._next >= self.opts.max_requests:
                return None
            job = self.jobs[self._next % len(self.jobs)]
            self._next += 1
            return job

    def _run(self) -> None:
        while (job := self._take()) is not None:
            url, prompt = job
            sent = time.monotonic() - self.t0
            c = complete(url, self.model, prompt, max_tokens=self.opts.max_tokens,
                         timeout=self.opts.request_timeout_s)
            with self._lock:
                self.samples.append(Sample(sent, url, c.ok, c.ttft_s if c.ok else None, c.cached_tokens,
                                           c.error[:200], time.monotonic() - self.t0))
            if not c.ok:
                time.sleep(0.2)  # a dead engine refuses at once: do not spin


@dataclass(frozen=True)
class Scenario:
    name: str
    proc: Callable[[FleetContext], tuple]     # -> (node, Proc) of the part to kill
    dead_engine: bool = False                        # requests to that engine cannot be served meanwhile


def _second(ctx: FleetContext):
    return ctx.fleet.instances()[1]


SCENARIOS: dict[str, Scenario] = {
    "peer_server_killed": Scenario("peer_server_killed",
                                   lambda ctx: (_second(ctx)[0], ctx.server_proc(*_second(ctx)))),
    "coordinator_restart": Scenario("coordinator_restart",
                                    lambda ctx: (ctx.fleet.coordinator_node(), ctx.coordinator_proc())),
    "engine_killed": Scenario("engine_killed", lambda ctx: (_second(ctx)[0], ctx.engine_proc(*_second(ctx))),
                              dead_engine=True),
}


def parse_scenarios(text: Optional[str]) -> list[str]:
    names = [s.strip() for s in (text or "").split(",") if s.strip()] or list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        raise BadInput(f"--scenarios {','.join(unknown)}: unknown; use any of {', '.join(SCENARIOS)}")
    return names


def _kill(ctx: FleetContext, node, proc: procs.Proc) -> int:
    [st] = procs.states(ctx.conn(node), [proc])
    if not st.running or st.pid is None:
        raise BadInput(f"{proc.name} is {st.state}, not running: start the fleet (`p2pctl up`) before a fault test")
    ctx.conn(node).run(f"kill -KILL -- -{int(st.pid)} 2>/dev/null || kill -KILL {int(st.pid)}", timeout=15)
    return st.pid


def _wait_ready(ctx: FleetContext, timeout_s: float) -> Optional[float]:
    """Seconds until the whole fleet reports ready (peers registered, engines healthy and connected)."""
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        if fleet_status.report(ctx).ready:
            return time.monotonic() - start
        time.sleep(0.5)
    return None


def _jobs(ctx: FleetContext, opts: FaultOptions, seed: int) -> tuple[list[str], list[tuple[str, str]]]:
    urls = [ctx.engine_url(node, inst) for node, inst in ctx.fleet.instances()]
    docs = [prompts.document(seed, i, opts.doc_chars) for i in range(opts.docs)]
    jobs = [(url, doc + "\n" + prompts.question(seed, i)) for i, doc in enumerate(docs) for url in urls]
    return docs, jobs


def run_scenario(ctx: FleetContext, name: str, opts: FaultOptions, progress: Progress = lambda _: None,
                 seed: Optional[int] = None) -> tuple[Figures, list[Sample]]:
    scenario = SCENARIOS[name]
    node, proc = scenario.proc(ctx)
    model = ctx.fleet.model
    seed = seed if seed is not None else int(time.time() * 1000) % 10**6
    if _wait_ready(ctx, opts.recover_timeout_s) is None:
        raise BadInput(f"fleet {ctx.fleet.name} is not ready (`p2pctl status`); a fault test needs a healthy fleet")
    docs, jobs = _jobs(ctx, opts, seed)
    first = ctx.engine_url(*ctx.fleet.instances()[0])
    for doc in docs:  # computed once on A: every other engine pulls these prefixes over P2P
        complete(first, model, doc, max_tokens=1, timeout=opts.request_timeout_s)

    figures = Figures(name, proc.name)
    t0 = time.monotonic()
    load = _Load(jobs, model, opts, t0).start()
    marks: dict[str, float] = {}
    try:
        time.sleep(opts.phase_s)
        progress(f"{name}: killing {proc.name}")
        _kill(ctx, node, proc)
        marks["fault"] = time.monotonic() - t0
        time.sleep(opts.hold_s)
        progress(f"{name}: starting {proc.name} again")
        procs.start(ctx.conn(node), proc)
        marks["restart"] = time.monotonic() - t0
        waited = _wait_ready(ctx, opts.recover_timeout_s)
        marks["recovered"] = time.monotonic() - t0
        figures.recovered = waited is not None
        if figures.recovered:
            figures.recovered_after_fault_s = round(marks["recovered"] - marks["fault"], 2)
            figures.reregistered_after_restart_s = round(marks["recovered"] - marks["restart"], 2)
            time.sleep(opts.phase_s)
    finally:
        load.stop()
    samples = sorted(load.samples, key=lambda s: s.t)
    _fill(figures, samples, marks, ctx, scenario, node)
    return figures, samples


def _phase(s: Sample, marks: dict[str, float]) -> str:
    """A request still in flight when the fault hit belongs to `during`: the fault is what it met."""
    if s.t_end < marks.get("fault", float("inf")):
        return "before"
    if s.t < marks.get("recovered", float("inf")):
        return "during"
    return "after"


def _fill(fig: Figures, samples: list[Sample], marks: dict[str, float], ctx: FleetContext, scenario: Scenario, node) -> None:
    dead_url = ""
    if scenario.dead_engine:
        dead_url = ctx.engine_url(*_second(ctx))
    fig.sent = len(samples)
    fig.failed = sum(not s.ok for s in samples)
    for ph in ("before", "during", "after"):
        in_phase = [s for s in samples if _phase(s, marks) == ph]
        fig.sent_by_phase[ph] = len(in_phase)
        fig.failed_by_phase[ph] = sum(not s.ok for s in in_phase)
        fig.p99_ttft_s[ph] = _round(percentile([s.ttft_s for s in in_phase if s.ok and s.ttft_s is not None], 99))
    for s in samples:
        if not s.ok:
            fig.failed_urls[s.url] = fig.failed_urls.get(s.url, 0) + 1
    fig.unexpected_failures = sum(not s.ok and s.url != dead_url for s in samples)
    notes = []
    if dead_url and fig.failed_urls.get(dead_url):
        notes.append(f"{fig.failed_urls[dead_url]} request(s) went to the killed engine {dead_url}: nothing can "
                     "serve them there until it is back (a router would send them to another engine)")
    if fig.unexpected_failures:
        first = next(s for s in samples if not s.ok and s.url != dead_url)
        notes.append(f"{fig.unexpected_failures} request(s) failed where recompute could have served them, "
                     f"first: {first.url}: {first.error}")
    if not fig.recovered:
        notes.append("the fleet was not ready again within the recovery timeout")
    fig.note = "; ".join(notes) or "no failed request"


def _round(v: Optional[float]) -> Optional[float]:
    return None if v is None else round(v, 3)


# ---- the run: all scenarios, a table in the run folder --------------------------------------------------

def run_faults(ctx: FleetContext, names: list[str], opts: FaultOptions, out_dir: Path,
               progress: Progress = lambda _: None) -> list[Figures]:
    out_dir.mkdir(parents=True, exist_ok=True)
    results = []
    for name in names:
        progress(f"scenario {name}")
        fig, samples = run_scenario(ctx, name, opts, progress)
        results.append(fig)
        with (out_dir / f"faults-{name}-requests.csv").open("w") as f:
            f.write("t_s,url,ok,ttft_s,cached_tokens,error\n")
            for s in samples:
                err = s.error.replace('"', "'").replace("\n", " ")
                f.write(f'{s.t:.3f},{s.url},{int(s.ok)},{"" if s.ttft_s is None else f"{s.ttft_s:.4f}"},'
                        f'{s.cached_tokens},"{err}"\n')
        write_table(results, out_dir, opts)  # after each scenario: a partial run still leaves its figures
    return results


def _s(v: Optional[float]) -> str:
    return "-" if v is None else f"{v:.3f}"


def table_markdown(results: list[Figures], opts: FaultOptions) -> str:
    lines = [
        "# Faults under load", "",
        f"phase {opts.phase_s:g} s before and after, part dead for {opts.hold_s:g} s, {opts.concurrency} client(s), "
        f"{opts.docs} shared document(s) of ~{opts.doc_chars} characters warmed on the first engine.", "",
        "| scenario | killed | sent | failed (before/during/after) | p99 TTFT s before | during | after | "
        "ready again after fault s | after restart s | recovered | note |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for f in results:
        fb = f.failed_by_phase
        lines.append(
            f"| {f.scenario} | {f.part} | {f.sent} | {f.failed} ({fb.get('before', 0)}/{fb.get('during', 0)}/"
            f"{fb.get('after', 0)}) | {_s(f.p99_ttft_s.get('before'))} | {_s(f.p99_ttft_s.get('during'))} | "
            f"{_s(f.p99_ttft_s.get('after'))} | {_s(f.recovered_after_fault_s)} | "
            f"{_s(f.reregistered_after_restart_s)} | {'yes' if f.recovered else 'NO'} | {f.note} |")
    return "\n".join(lines) + "\n"


def write_table(results: list[Figures], out_dir: Path, opts: FaultOptions) -> Path:
    path = out_dir / "faults.md"
    path.write_text(table_markdown(results, opts))
    (out_dir / "faults.json").write_text(json.dumps({"options": asdict(opts),
                                                     "scenarios": [f.to_json() for f in results]}, indent=2) + "\n")
    return path


def passed(results: list[Figures]) -> bool:
    return all(f.recovered and f.unexpected_failures == 0 for f in results)
