"""What LMCache's HTTP APIs say: an lmcache server's /status and /cache/objects, the coordinator's /healthz, /instances
and key directory (/directory/lookup, /directory/keys, /directory/stats). Read-only, every one."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional
from urllib.parse import quote

from p2p_ops.endpoints.fetch import get_answer, get_json, post_json


@dataclass
class ServerStatus:
    """The P2P-relevant part of an lmcache server's /status."""

    reachable: bool
    p2p_state: str = "unknown"
    peer_count: int = 0
    peers: list[str] = field(default_factory=list)
    chunk_size: Optional[int] = None
    hash_algorithm: Optional[str] = None
    l1_used: int = 0
    l1_total: int = 0
    p2p_adapters: int = 0
    raw: dict = field(default_factory=dict)


def _dict(value: object) -> dict:
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list:
    return value if isinstance(value, list) else []


def _count(value: object) -> int:
    """A count a server reports; anything but a finite non-negative number (a string, 1e400, a list) is 0: a
    crafted answer is 'unknown', never a traceback."""
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < 2**63 else 0


def l1_manager(status: dict) -> dict:
    """The L1 manager's part of a /status: `l1_manager` (0.5.6) or the default of `l1_managers`."""
    sm = _dict(status.get("storage_manager"))
    return _dict(sm.get("l1_manager")) or _dict(_dict(sm.get("l1_managers")).get("_default"))


def resident_objects(status: dict) -> int:
    """The L1 objects a server holds ready to serve: its `total_object_count` less `staging_object_count` (objects
    reserved for a write still in flight, invisible to readers: a peer asked while they stage misses them)."""
    l1 = l1_manager(status)
    return max(0, _count(l1.get("total_object_count")) - _count(l1.get("staging_object_count")))


def server_status(http_url: str) -> ServerStatus:
    """Docs and 0.5.6 serve /status; some revisions serve /api/status. Try both. Every field is read by its type:
    one of another type reads as unknown (0, empty), whatever the server (or whoever answers on its port) says."""
    for path in ("/status", "/api/status"):
        if (body := get_json(http_url.rstrip("/") + path)) is not None:
            break
    return parse_status(body)


def parse_status(body: object) -> ServerStatus:
    """A /status body, whatever it holds; not an object: the server did not answer as one."""
    if not isinstance(body, dict):
        return ServerStatus(reachable=False)
    sm, l1 = _dict(body.get("storage_manager")), l1_manager(body)
    used, total = l1.get("memory_used_bytes"), l1.get("memory_total_bytes")
    if isinstance(sm.get("l1_usage"), list) and len(sm["l1_usage"]) == 2:
        used, total = sm["l1_usage"]
    adapters, peers, chunk = _list(sm.get("l2_adapters")), _list(body.get("p2p_peers")), body.get("chunk_size")
    algorithm = body.get("hash_algorithm")
    return ServerStatus(reachable=True, p2p_state=str(body.get("p2p_state", "unknown")),
                        peer_count=_count(body.get("p2p_peer_count")),
                        peers=[str(p) for p in peers if isinstance(p, (str, int)) and not isinstance(p, bool)],
                        chunk_size=None if chunk is None else _count(chunk) or None,
                        hash_algorithm=algorithm if isinstance(algorithm, str) else None,
                        l1_used=_count(used), l1_total=_count(total),
                        p2p_adapters=sum(isinstance(a, dict) and a.get("type") == "P2PL2Adapter" for a in adapters),
                        raw=body)


def coordinator_instances(coordinator_url: str) -> Optional[list[dict]]:
    return parse_instances(get_json(coordinator_url.rstrip("/") + "/instances"))


def parse_instances(body: object) -> Optional[list[dict]]:
    """/instances' registrations, each an object (callers read them with .get); None: not the coordinator's
    answer."""
    if not isinstance(body, dict) or not isinstance(body.get("instances"), list):
        return None
    return [e for e in body["instances"] if isinstance(e, dict)]


def coordinator_healthy(coordinator_url: str) -> bool:
    body = get_json(coordinator_url.rstrip("/") + "/healthz")
    return isinstance(body, dict) and body.get("status") == "healthy"


# ---- what the fleet holds: the coordinator's key directory and a server's object listing ---------------------
# The directory is fed by the servers' cache events (`--coordinator-event-reporting`, which env.sh turns on with
# LMCACHE_COORDINATOR_EVENT_REPORTING); every route read here is read-only (no prefetch, no pull, no delete).

@dataclass
class Placement:
    instance_id: str
    tier: str            # l1 | l2
    backend: str = ""
    size_bytes: int = 0


@dataclass
class DirectoryEntry:
    key: dict                                  # EncodedObjectKey: chunk_hash_hex, model_name, kv_rank, ...
    placements: list[Placement] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    access_count: int = 0


def _entry(raw: dict) -> DirectoryEntry:
    placements = [Placement(str(p.get("instance_id", "")), str(p.get("tier", "")), str(p.get("backend", "")),
                            _count(p.get("size_bytes")))
                  for p in _list(raw.get("placements")) if isinstance(p, dict)]
    tokens = [t for t in _list(raw.get("token_ids")) if isinstance(t, int) and not isinstance(t, bool)]
    return DirectoryEntry(_dict(raw.get("key")), placements, tokens, _count(raw.get("access_count")))


def parse_directory_lookup(body: object) -> Optional[list[DirectoryEntry]]:
    """`POST /directory/lookup`'s `{"chunks": n, "results": [{key, placements, token_ids, access_count}]}`."""
    if not isinstance(body, dict) or not isinstance(body.get("results"), list):
        return None
    return [_entry(r) for r in body["results"] if isinstance(r, dict)]


def directory_lookup(coordinator_url: str, keys: list[dict]) -> tuple[Optional[list[DirectoryEntry]], str]:
    """Where the directory places each key (in request order); (None, why) when the coordinator refuses."""
    if not keys:
        return [], ""
    code, body = post_json(coordinator_url.rstrip("/") + "/directory/lookup", {"keys": keys})
    entries = parse_directory_lookup(body) if code == 200 else None
    if entries is None:
        return None, f"POST /directory/lookup answered {code or 'nothing'}: {str(body)[:200]}"
    return entries, ""


def directory_stats(coordinator_url: str) -> Optional[dict]:
    body = get_json(coordinator_url.rstrip("/") + "/directory/stats")
    return body if isinstance(body, dict) else None


def directory_keys(coordinator_url: str, instance_id: str = "", tier: str = "l1", limit: int = 1000,
                   max_keys: int = 100_000) -> Optional[list[DirectoryEntry]]:
    """Every key the directory places on `instance_id` (all instances when empty), page by page, bounded."""
    out: list[DirectoryEntry] = []
    while len(out) < max_keys:
        url = (f"{coordinator_url.rstrip('/')}/directory/keys?tier={tier}&instance_id={instance_id}"
               f"&offset={len(out)}&limit={limit}")
        body = get_json(url)
        if not isinstance(body, dict) or not isinstance(body.get("keys"), list):
            return out or None
        page = [_entry(k) for k in body["keys"] if isinstance(k, dict)]
        out += page
        if not page or len(out) >= _count(body.get("total")):
            return out
    return out


@dataclass
class ObjectListing:
    """`GET /cache/objects?tier=...` of one server: its entries, or why it refused (LMCache 0.5.6 lists only
    tier l2, and only adapters that implement listing; the P2P adapters do not)."""

    tier: str
    entries: list = field(default_factory=list)
    refused: str = ""


def cache_objects(http_url: str, tier: str, max_pages: int = 20) -> ObjectListing:
    out, token = ObjectListing(tier), ""
    for _ in range(max_pages):
        code, body = get_answer(f"{http_url.rstrip('/')}/cache/objects?tier={tier}&page_size=5000"
                                + (f"&page_token={quote(token, safe='')}" if token else ""))
        if code != 200 or not isinstance(body, dict):
            detail = body.get("detail") if isinstance(body, dict) else body
            out.refused = f"{code or 'no answer'}: {str(detail)[:200]}"
            return out
        out.entries += _list(body.get("entries"))
        token = nxt if isinstance(nxt := body.get("next_page_token"), str) else ""
        if not token:
            break
    return out


def p2p_adapters(status: dict) -> list[tuple[str, int, dict]]:
    """(peer host, peer mq port, the adapter's entry) of each P2P adapter in a server's /status, in adapter
    order (the order a lookup is planned in); the entry has `in_flight_lookups` and `in_flight_loads`."""
    urls = [(str(a.get("peer_mq_server_url", "")).rpartition("://")[2].rpartition(":"), a)
            for a in _list(_dict(status.get("storage_manager")).get("l2_adapters"))
            if isinstance(a, dict) and a.get("type") == "P2PL2Adapter"]
    return [(host, int(port), a) for (host, _, port), a in urls if port.isdecimal()]


def directory_lookup_tokens(coordinator_url: str, model: str, token_ids: list[int],
                            world_size: int = 1, cache_salt: str = "") -> Optional[list[DirectoryEntry]]:
    """Where the directory places each chunk key of a token sequence (the coordinator hashes it with its own
    chunk size and algorithm, which the fleet renders equal to the servers'): one entry per key of every full
    chunk, held or not; None: no answer."""
    request = {"token_ids": token_ids, "model_name": model, "world_size": world_size, "cache_salt": cache_salt}
    code, body = post_json(coordinator_url.rstrip("/") + "/directory/lookup", request)
    return parse_directory_lookup(body) if code == 200 else None


def directory_held_chunks(coordinator_url: str, model: str, token_ids: list[int], world_size: int = 1) -> Optional[int]:
    """How many of a token sequence's leading chunks the directory places anywhere; None: no answer."""
    entries = directory_lookup_tokens(coordinator_url, model, token_ids, world_size)
    if entries is None:
        return None
    held = next((n for n, e in enumerate(entries) if not e.placements), len(entries))
    return held // max(1, world_size)
