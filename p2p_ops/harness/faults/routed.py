"""Faults behind the router: the same kills, with every request sent to the fleet's vllm-router.

The router reports, per worker, how many requests it sent there (`vllm_router_processed_requests_total`), its
health-check verdict (`vllm_router_worker_health`) and its circuit breaker (`vllm_router_cb_state`: 0 closed,
1 open, 2 half-open) on its Prometheus port. `RouterWatch` samples them four times a second, so the figures say:

- stopped_sending_after_s: from the kill to the last request the router sent to the dead engine;
- marked_down_after_s: from the kill until its breaker opened or its health check failed;
- sent_again_after_restart_s: from the restart to the first request the router sent there again;
- retries: requests the router retried meanwhile (on another engine: what kept clients from seeing the kill);
- client_saw: each error a client got, by kind (none when failover works).

Since every engine can serve every request behind a router, any failed request counts against the scenario.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Optional

from p2p_ops.endpoints import metrics_api
from p2p_ops.harness.faults import drain
from p2p_ops.harness.faults.core import Kill, Load
from p2p_ops.observe.records import RequestRecord
from p2p_ops.lifecycle.context import FleetContext

SENT = "vllm_router_processed_requests_total"
HEALTH = "vllm_router_worker_health"
BREAKER = "vllm_router_cb_state"
RETRIES = "vllm_router_retries_total"


def worker_value(samples: list[metrics_api.Sample], name: str, worker: str) -> Optional[float]:
    """A per-worker router metric for `worker` (whatever its label is called); None when absent."""
    vals = [v for n, lab, v in samples if n == name and any(x.rstrip("/") == worker for x in lab.values())]
    return sum(vals) if vals else None


class RouterWatch(drain.Poller):
    """Samples the router's per-worker metrics for one worker: (t, sent, healthy, breaker), t since load.t0."""

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

    def inject(self, load: Load, progress) -> None:
        self.watch = RouterWatch(self.metrics_url, self.engine_url, load.t0).start()
        super().inject(load, progress)

    def cleanup(self) -> None:
        if self.watch:
            self.watch.stop()

    def finish(self, marks: dict[str, float], samples: list[RequestRecord]) -> None:
        if self.watch:
            self.watch.stop()
            self.extra.update(self.watch.figures(marks.get("fault", 0.0), marks.get("restart")))
        self.extra["client_saw"] = client_saw(samples) or "no error"
