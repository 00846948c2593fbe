"""The fleet's cache map (`p2pctl status --cache`): per node the objects its L1 holds, their bytes, how many of
them a peer holds too, and which test-run prefixes they belong to.

What each server holds comes from the coordinator's key directory (`GET /directory/keys`, fed by the servers'
cache events), its object count and bytes also from the server's own /status. Prefixes: the prompts the
newest test runs saved (prompts.jsonl), tokenized by a running engine and looked up with
`POST /directory/lookup` (the coordinator hashes them with the fleet's chunk size). Read-only.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

from p2p_ops import files
from p2p_ops.endpoints import engine_api, lmcache_api
from p2p_ops.lifecycle.context import FleetContext

MAX_RUNS = 3
MAX_PREFIXES = 40


@dataclass
class NodeCache:
    instance: str
    node: str
    directory_objects: int = 0          # L1 keys the directory places on it
    directory_bytes: int = 0
    status_objects: Optional[int] = None    # its own /status L1 object count (None: no answer)
    l1_used: int = 0
    l1_total: int = 0
    duplicated: int = 0                 # of its keys, how many another instance holds too
    prefixes: dict[str, int] = field(default_factory=dict)   # test-run prefix -> chunks of it held here


@dataclass
class PrefixCache:
    label: str                          # <run>/<request or prefix id>
    chunks: int
    held: dict[str, int] = field(default_factory=dict)       # instance -> leading chunks placed there


@dataclass
class CacheMap:
    nodes: list[NodeCache]
    prefixes: list[PrefixCache] = field(default_factory=list)
    total_keys: int = 0
    duplicated_keys: int = 0
    error: str = ""

    def to_json(self) -> dict:
        return asdict(self)


def _saved_prompts(tests_dir: Path) -> list[tuple[str, str]]:
    """(label, prompt) of one prompt per prefix of the newest runs (a stress prefix's requests share it)."""
    out: list[tuple[str, str]] = []
    runs = sorted((p for p in tests_dir.glob("*") if p.is_dir()), key=lambda p: p.name, reverse=True)
    for run in runs[:MAX_RUNS]:
        for path in (run / "prompts.jsonl", run / "basic" / "prompts.jsonl"):
            seen: set[str] = set()
            for line in files.read_text(path, 1 << 30, within=run).splitlines() if path.is_file() else []:
                row = files.parse_json(line, str(path), "rerun the test or remove the file")
                if not isinstance(row, dict):
                    continue
                key = str(row.get("prefix_id") or row.get("request"))
                if key not in seen and row.get("prompt") and isinstance(row["prompt"], str):
                    seen.add(key)
                    out.append((f"{run.name}/{key}", row["prompt"]))
    return out[:MAX_PREFIXES]


def _prefix(ctx: FleetContext, engine_url: str, label: str, prompt: str) -> Optional[PrefixCache]:
    tokens, _ = engine_api.tokenize(engine_url, ctx.fleet.model, prompt)
    if not tokens:
        return None
    entries = lmcache_api.directory_lookup_tokens(ctx.fleet.coordinator_url, ctx.fleet.model, tokens)
    if entries is None:
        return None
    pc = PrefixCache(label, len(entries))
    alive: Optional[set[str]] = None
    for e in entries:      # leading chunks only: a request can use a prefix, not a chunk after a gap
        here = {p.instance_id for p in e.placements}
        alive = here if alive is None else alive & here
        for inst in alive:
            pc.held[inst] = pc.held.get(inst, 0) + 1
    return pc


def cache_map(ctx: FleetContext) -> CacheMap:
    coord = ctx.fleet.coordinator_url
    listed = lmcache_api.directory_keys(coord, tier="l1")
    nodes = {i.id: NodeCache(i.id, n.name) for n, i in ctx.fleet.instances()}
    out = CacheMap(list(nodes.values()))
    if listed is None:
        out.error = "the coordinator's key directory did not answer (GET /directory/keys)"
    for e in listed or []:
        holders = {p.instance_id for p in e.placements if p.tier == "l1"}
        out.total_keys += 1
        out.duplicated_keys += len(holders) > 1
        for p in e.placements:
            if p.instance_id in nodes and p.tier == "l1":
                nodes[p.instance_id].directory_objects += 1
                nodes[p.instance_id].directory_bytes += p.size_bytes
                nodes[p.instance_id].duplicated += len(holders) > 1
    engine = None
    for n, i in ctx.fleet.instances():
        st = lmcache_api.server_status(ctx.server_url(n, i))
        if st.reachable:
            nodes[i.id].status_objects = lmcache_api.resident_objects(st.raw)
            nodes[i.id].l1_used, nodes[i.id].l1_total = st.l1_used, st.l1_total
        if engine is None and engine_api.engine_healthy(ctx.engine_url(n, i)):
            engine = ctx.engine_url(n, i)
    for label, prompt in _saved_prompts(ctx.layout.tests) if engine and listed is not None else []:
        pc = _prefix(ctx, engine, label, prompt)
        if pc is not None:
            out.prefixes.append(pc)
            for inst, held in pc.held.items():
                if inst in nodes:
                    nodes[inst].prefixes[label] = held
    return out
