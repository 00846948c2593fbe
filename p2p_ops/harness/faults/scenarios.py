"""The faults themselves. Each `Fault` breaks one part (`inject`), keeps it broken (`hold`) and mends it
(`restore`); the runner wraps them in the same measured load.

- peer_server_killed: node B's lmcache server (SIGKILL to its process group); B's engine must recompute.
- coordinator_restart: the coordinator; servers keep serving from their last membership and re-register.
- engine_killed: node B's engine; requests sent to it fail while it is down (nothing else serves them there).
- link_cut: node B's interface (the one holding its address) down for `hold_s`, restored by B itself.
- slow_peer: node A (which holds the shared documents) rate-limited on egress; B asks about fresh documents
  held only on A, so each pull is slower than `settings.p2p_load_timeout` and B must recompute.
- l1_full: many distinct long prompts to A until its L1 evicts (or is full); then the shared documents again.

- engine_killed_via_router, peer_server_killed_via_router: the same kills with every request sent to the
  fleet's router, which must route around the dead engine; any failed request counts against them (behind a
  router every engine can serve every request). `RouterWatch` samples the router's per-worker metrics (requests
  sent, health verdict, circuit breaker: 0 closed, 1 open, 2 half-open) four times a second, so the figures say
  when it stopped sending to the dead engine, marked it down and sent there again after the restart, how many
  requests it retried on another engine (what kept clients from seeing the kill) and what failed clients got.

Network faults are injected on the node itself, through its connector (so they work on a real cluster as on the
netns testbed), on the interface that holds the node's address. Each schedules its own undo *on the node*
(`nohup sh -c '...; sleep N; undo'`) before it bites, so losing the SSH session to the cut node (which the cut
causes) can never leave the link down or the rate limit on. `tc netem` would be the natural slow-peer tool, but
this kernel has no netem qdisc ("Specified qdisc kind is unknown"), so the slow peer is a token-bucket rate limit
(`tbf`) on the node's egress: bytes it serves to a peer (a P2P pull) crawl, requests still get through.
"""

from __future__ import annotations

import shlex
import time
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Optional

from p2p_ops.endpoints import lmcache_api, metrics_api
from p2p_ops.errors import BadInput, CouldNotRun
from p2p_ops.facts.netdev import IPV4_INTERFACES
from p2p_ops.facts.sections import read_fact
from p2p_ops.harness import load, prompts
from p2p_ops.harness.faults import drain
from p2p_ops.harness.faults.core import Fault, FaultOptions, Kill, closed_loop
from p2p_ops.lifecycle.context import FleetContext
from p2p_ops.observe.records import RequestRecord
from p2p_ops.spec.transfer_sizes import EVICTION_WATERMARK

SENT = "vllm_router_processed_requests_total"
HEALTH = "vllm_router_worker_health"
BREAKER = "vllm_router_cb_state"
RETRIES = "vllm_router_retries_total"


def _a(ctx: FleetContext):
    """(node, instance) of the fleet's first instance: A, which warms the shared documents."""
    return ctx.fleet.instances()[0]


def _b(ctx: FleetContext):
    """(node, instance) of the second instance: B, the one the node faults hit."""
    return ctx.fleet.instances()[1]


def eligible(ctx: FleetContext) -> str:
    """'' when network faults can be injected on every node of this fleet; else why not (one line)."""
    for node in ctx.fleet.nodes:
        if node.connection != "ssh":
            return (f"node {node.name} is connection: {node.connection}; network faults need SSH nodes with "
                    "their own interface (e.g. the netns testbed: scripts/testbed.sh up N --netns)")
    for node in ctx.fleet.nodes:
        iface = interface_of(ctx, node)
        if iface in ("", "lo"):
            return (f"node {node.name}'s address {node.address} is on {iface or 'no interface'}: taking that "
                    "down would cut every host, not one link; network faults need a host with its own interface")
    return ""


def interface_of(ctx: FleetContext, node) -> str:
    """The interface that holds the node's address, as the node sees it ("" when none does)."""
    return read_fact(ctx.conn(node), IPV4_INTERFACES, timeout=15).get(node.address, "")


@dataclass
class NetFault:
    """One fault on one node's interface; `undo()` is idempotent and also safe after the node's own undo."""

    ctx: object
    node: object
    iface: str
    undo_cmd: str
    what: str

    def undo(self) -> None:
        try:
            self.ctx.conn(self.node).run(self.undo_cmd + " 2>/dev/null || true", timeout=20)
        except Exception:  # noqa: BLE001 - the node's scheduled undo still runs; never mask the scenario's result
            pass


def _iface(ctx: FleetContext, node) -> str:
    iface = interface_of(ctx, node)
    if iface in ("", "lo"):
        raise BadInput(f"node {node.name}: no interface of its own holds {node.address} ({iface or 'none'})")
    return iface


def _schedule(ctx: FleetContext, node, body: str, what: str) -> None:
    """Run `body` detached on the node (it outlives this SSH session and the link it cuts)."""
    cmd = f"nohup sh -c {shlex.quote(body)} >/dev/null 2>&1 </dev/null & echo scheduled"
    res = ctx.conn(node).run(cmd, timeout=20)
    if not res.ok or "scheduled" not in res.stdout:
        raise CouldNotRun(f"node {node.name}: could not {what}: {(res.stderr or res.stdout).strip()[:300]}")


def rate_limit(ctx: FleetContext, node, seconds: float, rate_kbit: int) -> NetFault:
    """A token-bucket limit on the node's egress for `seconds` (undone by the node itself, and by undo())."""
    iface = _iface(ctx, node)
    q, n = shlex.quote(iface), max(1, int(round(seconds))) + 5
    burst = max(4, rate_kbit // 8)  # kbit: about 1/8 s of traffic (tbf needs at least one MTU)
    add = f"tc qdisc replace dev {q} root tbf rate {int(rate_kbit)}kbit burst {burst}kbit latency 2s"
    limit = NetFault(ctx, node, iface, f"tc qdisc del dev {q} root", f"{iface} egress limited to {rate_kbit} kbit/s")
    # Added synchronously (so its failure is seen here); the undo is scheduled before it.
    _schedule(ctx, node, f"sleep {n}; {limit.undo_cmd}", f"schedule the removal of a rate limit on {iface}")
    res = ctx.conn(node).run(add, timeout=20)
    if not res.ok:
        limit.undo()
        raise CouldNotRun(f"node {node.name}: `{add}` failed: {(res.stderr or res.stdout).strip()[:300]}")
    return limit


class _InterfaceFault(Fault):
    """A fault on a node's interface; cleanup() undoes it (`net`), whatever the node's own undo did."""

    net: Optional[NetFault] = None

    def cleanup(self) -> None:
        if self.net:
            self.net.undo()


class LinkCut(_InterfaceFault):
    def __init__(self, ctx: FleetContext, opts: FaultOptions) -> None:
        node, inst = _b(ctx)
        super().__init__(f"{node.name}'s link", ctx.engine_url(node, inst), "its host's link was down")
        self.ctx, self.node, self.opts = ctx, node, opts

    def inject(self, runner, progress) -> None:
        """The interface down for hold_s; the node brings it back by itself."""
        iface, n = _iface(self.ctx, self.node), max(1, round(self.opts.hold_s))
        q = shlex.quote(iface)
        self.net = NetFault(self.ctx, self.node, iface, f"ip link set dev {q} up", f"{iface} down for {n} s")
        # One second's grace: the SSH answer to this very command must leave before the link goes.
        _schedule(self.ctx, self.node, f"sleep 1; ip link set dev {q} down; sleep {n}; {self.net.undo_cmd}",
                  f"take {iface} down")
        time.sleep(1.2)
        self.until = time.monotonic() + n
        self.part = f"{self.node.name}:{iface} down"
        progress(f"{self.node.name}: {self.net.what}")

    def hold(self, runner, opts, progress) -> None:
        time.sleep(max(0.0, self.until - time.monotonic()) + 0.5)  # the node brings it back by itself


class SlowPeer(_InterfaceFault):
    def __init__(self, ctx: FleetContext, opts: FaultOptions, seed: int) -> None:
        node, _ = _a(ctx)
        super().__init__(f"{node.name}'s egress")
        self.ctx, self.node, self.opts, self.seed = ctx, node, opts, seed
        self.extra = {"p2p_load_timeout_s": ctx.fleet.effective_settings(_b(ctx)[1]).p2p_load_timeout,
                      "rate_kbit": opts.slow_rate_kbit}

    def inject(self, runner, progress) -> None:
        limit_s = self.opts.docs * 2 * (self.opts.request_timeout_s + 5) + 30  # the node's own undo, a backstop
        self.net = rate_limit(self.ctx, self.node, limit_s, self.opts.slow_rate_kbit)
        self.part = f"{self.node.name}:{self.net.iface} {self.opts.slow_rate_kbit} kbit/s"
        progress(f"{self.node.name}: {self.net.what}")

    def hold(self, runner, opts, progress) -> None:
        """Fresh documents, computed on A only: B's pull of each crawls through A's limited egress."""
        a_url, b_url = self.ctx.engine_url(*_a(self.ctx)), self.ctx.engine_url(*_b(self.ctx))
        fresh = []
        for i in range(opts.docs):
            doc = prompts.document(self.seed + 7919, i, opts.doc_chars)
            runner.send(load.Job(a_url, doc, max_tokens=1))
            fresh.append(runner.send(load.Job(b_url, doc + "\n" + prompts.question(self.seed + 7919, i))))
        ok = [s for s in fresh if s.ok]
        self.extra.update(fresh_docs=len(fresh), fresh_ok=len(ok),
                          fresh_from_cache=sum(s.cached_tokens > 0 for s in ok),
                          fresh_ttft_max_s=round(max((s.ttft_s or 0) for s in ok), 3) if ok else None)
        progress(f"slow peer: {len(ok)}/{len(fresh)} fresh requests served, "
                 f"{self.extra['fresh_from_cache']} with cached tokens")

    def restore(self, progress) -> None:
        self.cleanup()


def eviction_watermark(extra_args: list[str]) -> float:
    """The watermark a server runs with, from settings.server_extra_args (LMCache's default otherwise)."""
    flag = "--eviction-trigger-watermark"
    for i, a in enumerate(extra_args):
        try:
            if a == flag and i + 1 < len(extra_args):
                return float(extra_args[i + 1])
            if a.startswith(flag + "="):
                return float(a.split("=", 1)[1])
        except ValueError:
            break
    return EVICTION_WATERMARK


class L1Full(Fault):
    def __init__(self, ctx: FleetContext, opts: FaultOptions, seed: int) -> None:
        node, inst = _a(ctx)
        super().__init__(f"{inst.id}'s L1")
        self.ctx, self.opts, self.seed = ctx, opts, seed
        self.server, self.engine = ctx.server_url(node, inst), ctx.engine_url(node, inst)
        self.watermark = eviction_watermark(ctx.fleet.effective_settings(inst).server_extra_args)

    def _l1(self) -> tuple[int, int, float]:
        st = lmcache_api.server_status(self.server)
        evicted = sum(v for n, _, v in metrics_api.scrape(self.server)
                      if "l1_evicted" in n and not n.endswith("_created"))
        return st.l1_used, st.l1_total, evicted

    def inject(self, runner, progress) -> None:
        used, total, evicted = self._l1()
        self.extra.update(l1_total_bytes=total, l1_used_before=used, evicted_before=evicted,
                          watermark=self.watermark)
        progress(f"filling {self.part}: {used / 2**20:.0f} of {total / 2**20:.0f} MiB used")

    def hold(self, runner, opts, progress) -> None:
        jobs = [(self.engine, prompts.document(self.seed + 104729, i, opts.fill_chars))
                for i in range(opts.fill_max_requests)]
        # The same runner: the fill's requests are client requests too, in the one record.
        fill = closed_loop(runner, jobs, opts, cycle=False, stage="fill")
        start, full = time.monotonic(), False
        while not fill.done and time.monotonic() - start < opts.fill_timeout_s:
            used, total, evicted = self._l1()
            if evicted > self.extra["evicted_before"] or (total and used >= self.watermark * total):
                full = True
                break
            time.sleep(1.0)
        # Past the watermark: go on filling (bounded) until LMCache reports an eviction, so the fleet serves
        # under an evicting L1, not at its edge.
        until = time.monotonic() + max(opts.hold_s, 15.0)
        while full and not fill.done and time.monotonic() < until:
            if self._l1()[2] > self.extra["evicted_before"]:
                break
            time.sleep(1.0)
        fill.stop()
        used, total, evicted = self._l1()
        self.extra.update(l1_used_after=used, evicted=evicted - self.extra["evicted_before"], full=full,
                          fill_prompts=sum(r.stage == "fill" for r in runner.snapshot()))
        progress(f"{self.part}: {used / 2**20:.0f} of {total / 2**20:.0f} MiB, {evicted:g} chunk(s) evicted")


def worker_value(samples: list[metrics_api.Sample], name: str, worker: str) -> Optional[float]:
    """A per-worker router metric for `worker` (whatever its label is called); None when absent."""
    vals = [v for n, lab, v in samples if n == name and any(x.rstrip("/") == worker for x in lab.values())]
    return sum(vals) if vals else None


class RouterWatch(drain.Poller):
    """Samples the router's per-worker metrics for one worker: (t, sent, healthy, breaker), t since the load's t0."""

    def __init__(self, metrics_url: str, worker: str, t0: float, period_s: float = 0.25) -> None:
        super().__init__(period_s, "router-watch")
        self.url, self.worker, self.t0 = metrics_url, worker, t0
        self.rows: list[tuple[float, Optional[float], Optional[float], Optional[float]]] = []
        self.retries: list[float] = []

    def start(self) -> "RouterWatch":
        self.sample()
        return super().start()

    def sample(self) -> None:
        m = metrics_api.scrape(self.url)
        if not m:
            return  # the router did not answer this time: a gap, not a zero
        self.rows.append((time.monotonic() - self.t0, worker_value(m, SENT, self.worker),
                          worker_value(m, HEALTH, self.worker), worker_value(m, BREAKER, self.worker)))
        self.retries.append(metrics_api.metric_sum(m, RETRIES))

    def figures(self, fault_t: float, restart_t: Optional[float]) -> dict:
        return failover_figures(self.rows, fault_t, restart_t) | {
            "retries": round(self.retries[-1] - self.retries[0]) if len(self.retries) > 1 else None}


def failover_figures(rows: list[tuple[float, Optional[float], Optional[float], Optional[float]]], fault_t: float,
                     restart_t: Optional[float]) -> dict:
    """From (t, sent, healthy, breaker) samples: when the router stopped and restarted sending to the worker."""
    def sent_at(i: int) -> float:
        return rows[i][1] or 0.0

    grew = [rows[i][0] for i in range(1, len(rows)) if sent_at(i) > sent_at(i - 1)]
    end = restart_t if restart_t is not None else float("inf")
    while_dead = [t for t in grew if fault_t < t <= end]
    down = [t for t, _, healthy, cb in rows if t > fault_t and (healthy == 0 or cb in (1.0, 2.0))]
    again = [t for t in grew if restart_t is not None and t > restart_t]
    return {"stopped_sending_after_s": round(max(while_dead) - fault_t, 2) if while_dead else 0.0,
            "sent_while_dead": round(sum(sent_at(i) - sent_at(i - 1) for i in range(1, len(rows))
                                         if fault_t < rows[i][0] <= end)),
            "marked_down_after_s": round(min(down) - fault_t, 2) if down else None,
            "sent_again_after_restart_s": round(min(again) - restart_t, 2) if again and restart_t is not None
            else None}


def client_saw(samples: list[RequestRecord]) -> dict[str, int]:
    """What failed clients got, by kind (the first words of the error: an HTTP status, a refused connection)."""
    return dict(Counter(" ".join(s.error.split()[:4])[:60] or "error" for s in samples if not s.ok))


class RoutedKill(Kill):
    """A Kill whose load goes through the router; figures from the router's own metrics."""

    def __init__(self, ctx: FleetContext, node, proc, engine_url: str) -> None:
        super().__init__(ctx, node, proc)
        self.engine_url = engine_url
        r = ctx.fleet.router
        self.metrics_url = f"http://{ctx.fleet.router_node().address}:{r.prometheus_port}"
        self.watch: Optional[RouterWatch] = None
        self.extra = {"policy": r.policy, "router_retries": r.retries,
                      "cb_failure_threshold": r.cb_failure_threshold,
                      "health_check_interval_s": r.health_check_interval_s}

    def inject(self, runner: load.Load, progress) -> None:
        self.watch = RouterWatch(self.metrics_url, self.engine_url, runner.t0).start()
        super().inject(runner, progress)

    def cleanup(self) -> None:
        if self.watch:
            self.watch.stop()

    def finish(self, marks: dict[str, float], samples: list[RequestRecord]) -> None:
        if self.watch:  # stopped by cleanup(), which the runner calls first
            self.extra.update(self.watch.figures(marks.get("fault", 0.0), marks.get("restart")))
        self.extra["client_saw"] = client_saw(samples) or "no error"


@dataclass(frozen=True)
class Scenario:
    name: str
    make: Callable[[FleetContext, FaultOptions, int], Fault]
    needs_net: bool = False
    via_router: bool = False       # every request goes to the fleet's router (router.enabled)


def _routed(ctx: FleetContext, role: str) -> RoutedKill:
    node, inst = _b(ctx)
    return RoutedKill(ctx, node, ctx.proc(role, inst), ctx.engine_url(node, inst))


SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    Scenario("peer_server_killed", lambda ctx, o, seed: Kill(ctx, _b(ctx)[0], ctx.proc("server", _b(ctx)[1]))),
    Scenario("coordinator_restart",
             lambda ctx, o, seed: Kill(ctx, ctx.fleet.coordinator_node(), ctx.proc("coordinator"))),
    Scenario("engine_killed", lambda ctx, o, seed: Kill(ctx, _b(ctx)[0], ctx.proc("engine", _b(ctx)[1]),
                                                          dead_engine=ctx.engine_url(*_b(ctx)))),
    Scenario("link_cut", lambda ctx, o, seed: LinkCut(ctx, o), needs_net=True),
    Scenario("slow_peer", lambda ctx, o, seed: SlowPeer(ctx, o, seed), needs_net=True),
    Scenario("l1_full", lambda ctx, o, seed: L1Full(ctx, o, seed)),
    Scenario("engine_killed_via_router", lambda ctx, o, seed: _routed(ctx, "engine"), via_router=True),
    Scenario("peer_server_killed_via_router", lambda ctx, o, seed: _routed(ctx, "server"), via_router=True),
)}


def parse_scenarios(text: Optional[str]) -> list[str]:
    """Without --scenarios: every scenario (the runner skips those this fleet does not allow)."""
    names = [s.strip() for s in (text or "").split(",") if s.strip()] or list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        raise BadInput(f"--scenarios {','.join(unknown)}: unknown; use any of {', '.join(SCENARIOS)}")
    return names


def why_not(ctx: FleetContext, name: str) -> str:
    """'' when the scenario can run on this fleet; else why not (one line)."""
    if len(ctx.fleet.instances()) < 2:
        return "needs at least two instances"
    if SCENARIOS[name].via_router and not ctx.fleet.router.enabled:
        return "needs the fleet's router (router: {enabled: true})"
    return eligible(ctx) if SCENARIOS[name].needs_net else ""
