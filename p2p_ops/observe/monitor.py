"""The live per-node view: P2P loads, hit ratio, L1 use, queue, TTFT — from Prometheus or straight from /metrics.

A frame is computed from two observations of every instance's counters (a window apart): rates come from
their difference, totals from the later one. With Prometheus the same figures come from PromQL.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from typing import Iterator, Optional

from p2p_ops.endpoints import metrics_api
from p2p_ops.endpoints.metrics_api import HIT_TOKENS, L1_RATIO, L1_USED, REQ_TOKENS, RUNNING, TTFT, WAITING
from p2p_ops.errors import CouldNotRun
from p2p_ops.lifecycle import prometheus as prom
from p2p_ops.lifecycle.context import FleetContext
from p2p_ops.observe.stats import fmt

Samples = list[tuple[str, dict[str, str], float]]



@dataclass
class NodeFrame:
    instance: str
    node: str
    up: bool
    p2p_loads_total: float = 0.0
    p2p_loads_per_s: float = 0.0
    hit_ratio: Optional[float] = None
    l1_used_bytes: float = 0.0
    l1_usage_ratio: Optional[float] = None
    running: float = 0.0
    waiting: float = 0.0
    ttft_p50_s: Optional[float] = None
    ttft_p99_s: Optional[float] = None

    def to_dict(self) -> dict:
        return asdict(self)


def buckets(samples: Samples, name: str) -> list[tuple[float, float]]:
    """Cumulative histogram buckets (le, count) of `name`, summed over label sets, sorted by le."""
    acc: dict[float, float] = {}
    for n, labels, v in samples:
        if n == f"{name}_bucket" and "le" in labels:
            le = math.inf if labels["le"] in ("+Inf", "inf") else float(labels["le"])
            acc[le] = acc.get(le, 0.0) + v
    return sorted(acc.items())


def histogram_quantile(q: float, cumulative: list[tuple[float, float]]) -> Optional[float]:
    """Prometheus' histogram_quantile: linear interpolation inside the bucket that holds the q-th rank."""
    if not cumulative or cumulative[-1][1] <= 0:
        return None
    rank = q * cumulative[-1][1]
    prev_le, prev_count = 0.0, 0.0
    for le, count in cumulative:
        if count >= rank:
            if math.isinf(le):
                return prev_le
            if count == prev_count:
                return le
            return prev_le + (le - prev_le) * (rank - prev_count) / (count - prev_count)
        prev_le, prev_count = le, count
    return prev_le


def frame_from_samples(instance: str, node: str, server_before: Samples, server_after: Samples,
                       engine_before: Samples, engine_after: Samples, dt: float) -> NodeFrame:
    """Pure: one node's frame from two scrapes of its server and engine, dt seconds apart."""
    up = bool(server_after) or bool(engine_after)
    s = metrics_api.metric_sum
    loads_total = s(server_after, metrics_api.P2P_LOADS, l2_name="p2p")
    loads_rate = max(0.0, loads_total - s(server_before, metrics_api.P2P_LOADS, l2_name="p2p")) / dt if dt > 0 else 0.0
    d_hit = s(server_after, HIT_TOKENS) - s(server_before, HIT_TOKENS)
    d_req = s(server_after, REQ_TOKENS) - s(server_before, REQ_TOKENS)
    if d_req > 0:
        hit_ratio: Optional[float] = d_hit / d_req
    else:  # nothing in the window: the ratio since start is still worth showing
        req = s(server_after, REQ_TOKENS)
        hit_ratio = s(server_after, HIT_TOKENS) / req if req > 0 else None
    earlier = dict(buckets(engine_before, TTFT))
    ttft = [(le, max(0.0, c - earlier.get(le, 0.0))) for le, c in buckets(engine_after, TTFT)]
    if not ttft or ttft[-1][1] <= 0:
        ttft = buckets(engine_after, TTFT)
    ratio = [v for n, _, v in server_after if n == L1_RATIO]
    return NodeFrame(
        instance=instance, node=node, up=up, p2p_loads_total=loads_total, p2p_loads_per_s=loads_rate,
        hit_ratio=hit_ratio, l1_used_bytes=s(server_after, L1_USED), l1_usage_ratio=max(ratio) if ratio else None,
        running=s(engine_after, RUNNING), waiting=s(engine_after, WAITING),
        ttft_p50_s=histogram_quantile(0.5, ttft), ttft_p99_s=histogram_quantile(0.99, ttft))


def frame_direct(ctx: FleetContext, window_s: float = 2.0) -> list[NodeFrame]:
    """Scrape every server and engine twice, window_s apart (no Prometheus needed)."""
    targets = [(n, i, ctx.server_url(n, i), ctx.engine_url(n, i)) for n, i in ctx.fleet.instances()]
    first = [(metrics_api.scrape(s), metrics_api.scrape(e)) for _, _, s, e in targets]
    t0 = time.monotonic()
    time.sleep(window_s)
    second = [(metrics_api.scrape(s), metrics_api.scrape(e)) for _, _, s, e in targets]
    dt = time.monotonic() - t0
    return [frame_from_samples(i.id, n.name, a[0], b[0], a[1], b[1], dt)
            for (n, i, _, _), a, b in zip(targets, first, second)]


def frame_prometheus(prom_url: str, ctx: FleetContext, window: str = "1m") -> list[NodeFrame]:
    """The same figures as PromQL over the fleet's Prometheus (labels from its rendered config)."""
    from prometheus_api_client import PrometheusConnect

    pc = PrometheusConnect(url=prom_url, disable_ssl=True)

    def by_instance(query: str) -> dict[str, float]:
        out: dict[str, float] = {}
        for item in pc.custom_query(query):
            inst = item["metric"].get("fleet_instance")
            try:
                value = float(item["value"][1])
            except (KeyError, ValueError, IndexError):
                continue
            if inst is not None and not math.isnan(value):
                out[inst] = value
        return out

    # Keyed by NodeFrame field: an instance a query has no value for keeps the field's default (0 or None).
    q = {k: by_instance(query) for k, query in {
        "up": 'max by (fleet_instance) (up{job="lmcache_server"})',
        "p2p_loads_total": f'sum by (fleet_instance) ({metrics_api.P2P_LOADS}{{l2_name="p2p"}})',
        "p2p_loads_per_s": f'sum by (fleet_instance) (rate({metrics_api.P2P_LOADS}{{l2_name="p2p"}}[{window}]))',
        "hit_ratio": f'sum by (fleet_instance) (increase({HIT_TOKENS}[{window}])) / '
                     f'sum by (fleet_instance) (increase({REQ_TOKENS}[{window}]))',
        "l1_used_bytes": f"sum by (fleet_instance) ({L1_USED})",
        "l1_usage_ratio": f"max by (fleet_instance) ({L1_RATIO})",
        "running": f'sum by (fleet_instance) ({RUNNING})',
        "waiting": f"sum by (fleet_instance) ({WAITING})",
        "ttft_p50_s": f"histogram_quantile(0.5, sum by (fleet_instance, le) (rate({TTFT}_bucket[{window}])))",
        "ttft_p99_s": f"histogram_quantile(0.99, sum by (fleet_instance, le) (rate({TTFT}_bucket[{window}])))",
    }.items()}
    up = q.pop("up")
    return [NodeFrame(instance=inst.id, node=node.name, up=up.get(inst.id, 0.0) > 0,
                      **{k: v[inst.id] for k, v in q.items() if inst.id in v}) for node, inst in ctx.fleet.instances()]


def render_table(frames: list[NodeFrame], source: str):
    from rich.table import Table

    table = Table(title=f"fleet monitor ({source}) — {time.strftime('%H:%M:%S')}")
    for col in ("instance", "node", "up", "P2P loads/s", "P2P loads total", "hit ratio", "L1 used MiB", "L1 use",
                "running", "waiting", "TTFT p50 ms", "TTFT p99 ms"):
        table.add_column(col, justify="right" if col not in ("instance", "node") else "left")
    for f in frames:
        table.add_row(f.instance, f.node, "yes" if f.up else "[red]no[/red]", f"{f.p2p_loads_per_s:.2f}",
                      f"{f.p2p_loads_total:g}", fmt(f.hit_ratio, "{:.0f}%", 100), f"{f.l1_used_bytes / 2**20:.1f}",
                      fmt(f.l1_usage_ratio, "{:.0f}%", 100), f"{f.running:g}", f"{f.waiting:g}",
                      fmt(f.ttft_p50_s, "{:.0f}", 1000), fmt(f.ttft_p99_s, "{:.0f}", 1000))
    return table


def rate_window(interval_s: float) -> float:
    """Seconds between the two scrapes of a direct frame: the frame interval, kept within 0.5..5 s so a rate
    is neither noise nor a long stall."""
    return max(0.5, min(interval_s, 5.0))


def frame(ctx: FleetContext, source: str, window_s: float) -> tuple[list[NodeFrame], str]:
    """One frame and where it came from. source auto: the fleet's Prometheus when it answers, else /metrics
    directly; prometheus: that or CouldNotRun; direct: /metrics."""
    if source in ("auto", "prometheus") and prom.ready(ctx):
        return frame_prometheus(prom.url(ctx), ctx), f"prometheus {prom.url(ctx)}"
    if source == "prometheus":
        raise CouldNotRun(f"no Prometheus answers at {prom.url(ctx)}; start it with `p2pctl prometheus up`")
    return frame_direct(ctx, window_s), "direct /metrics"


def frames(ctx: FleetContext, source: str, interval_s: float, count: int) -> Iterator[tuple[list[NodeFrame], str]]:
    """`count` frames (at least one), one every interval_s, each with its source: a direct frame spends its rate window
    scraping, so only a Prometheus one waits the interval before the next."""
    window, label = rate_window(interval_s), ""
    for i in range(max(count, 1)):
        if i and label.startswith("prometheus"):
            time.sleep(interval_s)
        got, label = frame(ctx, source, window)
        yield got, label


def all_up(frames: list[NodeFrame]) -> bool:
    return all(f.up for f in frames)
