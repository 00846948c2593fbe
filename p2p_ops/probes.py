"""HTTP probes of the coordinator, the lmcache servers and the engines, with pure parsers of what they say."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import requests
from prometheus_client.parser import text_string_to_metric_families

from p2p_ops import auth

TIMEOUT = 3.0


def get_json(url: str, timeout: float = TIMEOUT) -> Optional[Any]:
    """GET and decode JSON; None when nothing answers or the answer is not a 200 JSON body."""
    try:
        resp = requests.get(url, timeout=timeout, headers=auth.headers(url))
        if resp.status_code != 200:
            return None
        return resp.json()
    except (requests.RequestException, ValueError):
        return None


def get_text(url: str, timeout: float = TIMEOUT) -> Optional[str]:
    try:
        resp = requests.get(url, timeout=timeout, headers=auth.headers(url))
        return resp.text if resp.status_code == 200 else None
    except requests.RequestException:
        return None


@dataclass
class ServerStatus:
    """The P2P-relevant part of an lmcache server's /status."""

    reachable: bool
    healthy: bool = False
    p2p_enabled: bool = False
    p2p_state: str = "unknown"
    peer_count: int = 0
    peers: list[str] = field(default_factory=list)
    chunk_size: Optional[int] = None
    hash_algorithm: Optional[str] = None
    l1_used: int = 0
    l1_total: int = 0
    p2p_adapters: int = 0
    raw: dict = field(default_factory=dict)


def parse_server_status(body: Optional[dict]) -> ServerStatus:
    if not isinstance(body, dict):
        return ServerStatus(reachable=False)
    sm = body.get("storage_manager") or {}
    l1 = sm.get("l1_manager") or (sm.get("l1_managers") or {}).get("_default") or {}
    used, total = l1.get("memory_used_bytes", 0), l1.get("memory_total_bytes", 0)
    if isinstance(sm.get("l1_usage"), list) and len(sm["l1_usage"]) == 2:
        used, total = sm["l1_usage"]
    adapters = [a for a in sm.get("l2_adapters") or [] if isinstance(a, dict) and a.get("type") == "P2PL2Adapter"]
    return ServerStatus(
        reachable=True,
        healthy=bool(body.get("is_healthy")),
        p2p_enabled=bool(body.get("p2p_enabled")),
        p2p_state=str(body.get("p2p_state", "unknown")),
        peer_count=int(body.get("p2p_peer_count") or 0),
        peers=list(body.get("p2p_peers") or []),
        chunk_size=body.get("chunk_size"),
        hash_algorithm=body.get("hash_algorithm"),
        l1_used=int(used or 0),
        l1_total=int(total or 0),
        p2p_adapters=len(adapters),
        raw=body,
    )


def server_status(http_url: str) -> ServerStatus:
    """Docs and 0.5.6 serve /status; some revisions serve /api/status. Try both."""
    for path in ("/status", "/api/status"):
        body = get_json(http_url.rstrip("/") + path)
        if body is not None:
            return parse_server_status(body)
    return ServerStatus(reachable=False)


def coordinator_instances(coordinator_url: str) -> Optional[list[dict]]:
    body = get_json(coordinator_url.rstrip("/") + "/instances")
    if isinstance(body, dict) and isinstance(body.get("instances"), list):
        return body["instances"]
    return None


def coordinator_healthy(coordinator_url: str) -> bool:
    body = get_json(coordinator_url.rstrip("/") + "/healthz")
    return isinstance(body, dict) and body.get("status") == "healthy"


def engine_healthy(engine_url: str) -> bool:
    try:
        return requests.get(engine_url.rstrip("/") + "/health", timeout=TIMEOUT,
                            headers=auth.headers(engine_url)).status_code == 200
    except requests.RequestException:
        return False


def engine_lmcache_state(engine_url: str) -> str:
    """The embedded engine's link to its lmcache server: connected | disconnected | n/a (no such metric)."""
    # Only this metric's lines are parsed: a full parse of an engine's /metrics took 0.1 s of CPU per engine,
    # serial in `status`, and most of status's time at 8 hosts (bench/fleet_scale.py profiles).
    text = get_text(engine_url.rstrip("/") + "/metrics") or ""
    wanted = "".join(line + "\n" for line in text.splitlines() if line.startswith("p2p_engine_lmcache_connected"))
    values = [v for n, _, v in parse_metrics(wanted) if n == "p2p_engine_lmcache_connected"]
    if not values:
        return "n/a"
    return "connected" if max(values) >= 1 else "disconnected"


# ---- Prometheus text ---------------------------------------------------------------------------------

Sample = tuple[str, dict[str, str], float]


def _parse(text: str) -> list[Sample]:
    return [(smp.name, dict(smp.labels), float(smp.value))
            for fam in text_string_to_metric_families(text) for smp in fam.samples]


def parse_metrics(text: str) -> list[Sample]:
    """Prometheus text exposition -> (name, labels, value) samples, by prometheus_client's parser (+Inf buckets,
    escaped label values, NaN). A malformed line costs only itself: the text is then parsed line by line."""
    text = text or ""
    try:
        return _parse(text)
    except ValueError:
        pass
    out: list[Sample] = []
    for line in text.splitlines():
        if line and not line.startswith("#"):
            try:
                out.extend(_parse(line + "\n"))
            except ValueError:
                continue
    return out


def metric_sum(samples: list[Sample], name: str, **labels: str) -> float:
    """Sum of a metric's samples whose labels include `labels` (0.0 when absent: counters appear lazily)."""
    return sum(v for n, lab, v in samples if n == name and all(lab.get(k) == val for k, val in labels.items()))


def scrape(url: str) -> list[Sample]:
    return parse_metrics(get_text(url.rstrip("/") + "/metrics") or "")
