"""`p2pctl grafana`: a Grafana dashboard (JSON model) for the fleet's Prometheus.

Every panel is one PromQL expression over the series this fleet's Prometheus scrapes (labels `node` and
`fleet_instance` come from templates/prometheus.yml.j2). `panels()` lists them so a test can evaluate each
one against a running fleet.
"""

from __future__ import annotations

from dataclasses import dataclass

from p2p_ops.endpoints import metrics_api as m
from p2p_ops.errors import BadInput

WINDOW = "1m"


@dataclass(frozen=True)
class Panel:
    title: str
    expr: str
    legend: str
    unit: str
    description: str


def panels(window: str = WINDOW) -> list[Panel]:
    w = window
    return [
        Panel("P2P loads from peers per node",
              f'sum by (node) (rate({m.P2P_LOADS}{{l2_name="p2p"}}[{w}]))',
              "{{node}}", "reqps", "Completed KV loads a node's lmcache server read from its peers."),
        Panel("KV bytes loaded per node",
              f"sum by (node) (rate({m.ENGINE_LOADED_BYTES}[{w}]))",
              "{{node}}", "Bps", "KV bytes each engine loaded from its lmcache server (local or pulled from peers)."),
        Panel("Peers seen per server",
              f'sum by (fleet_instance) ({m.PREFETCH_ADAPTERS}{{state="active"}})',
              "{{fleet_instance}}", "short", "Active peer adapters; every server should see all other servers."),
        Panel("TTFT p50 per engine",
              f"histogram_quantile(0.5, sum by (le, fleet_instance) "
              f"(rate({m.TTFT}_bucket[{w}])))",
              "{{fleet_instance}}", "s", "Median time to first token."),
        Panel("Cached-token ratio per engine",
              f"sum by (fleet_instance) (rate({m.PREFIX_CACHE_HITS}[{w}]) "
              f"+ rate({m.EXTERNAL_PREFIX_CACHE_HITS}[{w}])) "
              f"/ sum by (fleet_instance) (rate({m.PROMPT_TOKENS}[{w}]))",
              "{{fleet_instance}}", "percentunit", "Prompt tokens served from a cache (local or LMCache/peers)."),
        Panel("L1 use per server", f"max by (fleet_instance) ({m.L1_RATIO})",
              "{{fleet_instance}}", "percentunit", "lmcache L1 memory in use; eviction starts near 0.8."),
        Panel("LMCache lookup latency p90 per engine",
              f'histogram_quantile(0.9, sum by (le, fleet_instance) '
              f'(rate({m.ENGINE_OP_SECONDS}_bucket{{op="lookup"}}[{w}])))',
              "{{fleet_instance}}", "s", "How long an engine waits for its lmcache server's lookup (peers included)."),
    ]


def dashboard(fleet_name: str, window: str = WINDOW, datasource_uid: str = "${datasource}") -> dict:
    """Grafana dashboard JSON (schema 39): a datasource variable and one time-series panel per row of two."""
    source = {"type": "prometheus", "uid": datasource_uid}
    out_panels = [{"id": i + 1, "type": "timeseries", "title": p.title, "description": p.description,
                   "gridPos": {"h": 8, "w": 12, "x": 12 * (i % 2), "y": 8 * (i // 2)}, "datasource": source,
                   "fieldConfig": {"defaults": {"unit": p.unit}, "overrides": []},
                   "targets": [{"refId": "A", "expr": p.expr, "legendFormat": p.legend, "datasource": source}]}
                  for i, p in enumerate(panels(window))]
    return {"title": f"LMCache P2P fleet {fleet_name}", "uid": f"p2p-{fleet_name}"[:40],
            "tags": ["lmcache", "p2p", "kv-cache"], "schemaVersion": 39, "version": 1, "editable": True,
            "time": {"from": "now-30m", "to": "now"}, "refresh": "10s",
            "templating": {"list": [{"name": "datasource", "type": "datasource", "query": "prometheus",
                                     "label": "Prometheus"}]},
            "panels": out_panels}


def check_window(window: str) -> None:
    """The rate window must be a plain Prometheus duration (digits and one unit), or every panel errors."""
    if not window or not window[:-1].isdecimal() or window[-1] not in "smh":
        raise BadInput(f"--window {window!r}: give a Prometheus duration like 30s, 1m or 5m")
