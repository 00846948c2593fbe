"""What LMCache's HTTP APIs say: an lmcache server's /status and the coordinator's /healthz and /instances."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from p2p_ops.endpoints.fetch import get_json


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
