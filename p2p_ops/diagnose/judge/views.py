"""What explain reads about a fleet for one prompt, and what it says of each chunk: the types the chunk judge
(`chunk.py`) reads and fills. explain's gather builds them; the cause cases (tests/fixtures/causes) write them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from p2p_ops.causes import Verdict
from p2p_ops.diagnose.findings import Finding
from p2p_ops.endpoints.lmcache_api import Placement
from p2p_ops.facts.chunk_keys import ChunkKeys, KeyInputs

# What a request would do with one chunk.
HIT, PULL, RECOMPUTE, PARTIAL = "hit", "pull", "recompute", "partial"


@dataclass
class InstanceView:
    """One instance as explain reads it."""

    instance: str
    node: str
    server_state: str = "unknown"            # running | dead | none | unreachable ...
    engine_state: str = "unknown"
    engine_degraded: bool = False            # the engine serves without its lmcache server
    inputs: Optional[KeyInputs] = None       # what its server's keys depend on (None: server unread)
    tokens: Optional[list[int]] = None       # what its engine's /tokenize made of the prompt
    tokenize_error: str = ""
    engine_mute: bool = False                # its engine is not running or answered nothing (a request fails)
    keys: Optional[ChunkKeys] = None         # LMCache's hasher on its node, under its server's settings
    keys_from: str = ""                      # which LMCache process computed `keys`
    logged_none_hash: Optional[str] = None   # `Computed NONE_HASH=` from its server.log
    hash_fallback: Optional[str] = None      # LMCache fell back to Python's hash() for this algorithm
    p2p_state: str = "unknown"
    peers: list[str] = field(default_factory=list)          # p2p_peers of its /status
    adapter_order: list[str] = field(default_factory=list)  # peer instance ids in its P2P adapter order
    registered: bool = False                 # listed by the coordinator's /instances
    evicted_keys: float = 0.0                # L1 chunks its server deleted since it started (evictions, and
                                             # the temporary copies of pulls it served)
    eviction_runs: float = 0.0               # eviction-loop passes that evicted (L1 over its watermark)
    l1_used: int = 0
    l1_total: int = 0
    chunk_bytes: int = 0                     # one chunk's KV in L1 (the embedded engine's profile; 0: unknown)
    lookup_timeouts: list[str] = field(default_factory=list)   # recent 'P2P lookup ... timed out' lines
    p2p_loads: float = 0.0                   # pulls from peers its server completed since it started
    tokens_by_source: dict[str, float] = field(default_factory=dict)   # vLLM: prompt tokens by source

    @property
    def serving(self) -> bool:
        return self.server_state == "running" and self.inputs is not None

    def hashes(self) -> list[str]:
        return self.keys.hashes() if self.keys and not self.keys.error else []


@dataclass
class ExplainFacts:
    fleet: str
    runtime: str
    prompt_label: str
    instances: list[InstanceView]
    targets: list[str]                                   # the instances to explain
    placements: dict[str, list[Placement]] = field(default_factory=dict)    # chunk hash -> where it lives
    directory_error: str = ""                            # why the directory could not be read
    reporting: dict[str, bool] = field(default_factory=dict)   # instance -> reports cache events
    held_keys: int = 0          # L1 keys the directory lists fleet-wide (any prompt's)
    causes: dict[str, Finding] = field(default_factory=dict)   # instance -> the one judge's cause of its state
    listing: dict[str, str] = field(default_factory=dict)      # instance -> what /cache/objects?tier=l1 said
    near: dict[str, dict] = field(default_factory=dict)  # target -> a held chunk nearly matching its first missing one
    events_error: dict[str, str] = field(default_factory=dict)  # instance -> why its engine's KV events went unread
    sent: dict[str, str] = field(default_factory=dict)   # target -> the newest saved request that sent it this prompt
    computed_on: str = ""       # the instance a saved test run says computed this prompt ("" = not known)
    run: str = ""               # that run's folder
    recorded: dict = field(default_factory=dict)   # what the run recorded for the request (instance, figures)
    timings: dict[str, float] = field(default_factory=dict)   # seconds per phase of the gather

    def view(self, instance: str) -> Optional[InstanceView]:
        return next((v for v in self.instances if v.instance == instance), None)


@dataclass
class ChunkVerdict:
    index: int
    start: int
    end: int
    key: str = ""                       # the chunk hash under the target's settings
    here: str = ""                      # l1 | l2 | "" (the target's own server holds it)
    holders: list[str] = field(default_factory=list)    # other instances holding this very key
    action: str = RECOMPUTE             # hit | pull | recompute | partial
    source: str = ""                    # the peer a pull reads from (its node name when it runs one instance)
    reason: str = ""                    # the cause's id: chunk_size_differs, peer_not_connected, evicted, ...
    detail: str = ""                    # the reason in words, with its evidence
    cause: Optional[Verdict] = None     # the reason as the catalogue's verdict (its subject may be a peer)

    def describe(self) -> str:
        recompute = "recompute" + (f": {self.reason}" if self.reason else "")
        pull = f"pull from {self.source}" + (f" (at risk: {self.reason})" if self.reason else "")
        return {HIT: f"local hit ({self.here.upper()})", PULL: pull,
                PARTIAL: "never cached (partial chunk)"}.get(self.action, recompute)
