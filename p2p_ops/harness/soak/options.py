"""What a soak run is: its length, its load and the rule that tells a leak from warm-up."""

from __future__ import annotations

import re
from dataclasses import dataclass

from p2p_ops.errors import BadInput

_UNITS = {"s": 1, "m": 60, "h": 3600}


def parse_duration(text: str) -> float:
    """"90s", "30m", "1h", "1h30m" or plain seconds -> seconds; bad input names the flag and the forms."""
    t = (text or "").strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", t):
        return float(t)
    parts = re.findall(r"(\d+(?:\.\d+)?)([smh])", t)
    if not parts or "".join(n + u for n, u in parts) != t:
        raise BadInput(f"--duration {text}: give seconds or a length like 90s, 30m, 1h, 1h30m")
    return sum(float(n) * _UNITS[u] for n, u in parts)


@dataclass(frozen=True)
class LeakRule:
    """A leak's least growth, first window floor to last, and least slope (leaks.py tells a leak from warm-up)."""

    min_per_hour: float
    min_growth: float


@dataclass(frozen=True)
class SoakOptions:
    duration_s: float = 1800.0
    # Left out of slopes: caches, pools and connections settle, and the fill brings every L1 to its watermark
    # (three 1 GiB L1s took 6 min on a busy 2-core box, the 2026-12-01 soak B).
    warmup_s: float = 600.0
    sample_every_s: float = 10.0     # process and server samples
    proof_every_s: float = 300.0     # the cross-node proof (test basic) under the load
    concurrency: int = 2             # clients in flight
    docs: int = 4                    # shared documents, warmed on the first engine, asked about everywhere
    doc_chars: int = 1600            # > 4 chunks of 256 byte-tokens: real P2P pulls
    sessions: int = 3                # multi-turn conversations, moved to the next engine every few turns
    session_max_chars: int = 6000    # a session longer than this starts over (bounded prompts)
    fresh_chars: int = 900           # prompts no one asked before: new KV every time (L1 fills and evicts)
    max_tokens: int = 8
    request_timeout_s: float = 60.0
    via_router: bool = False
    fill_l1: bool = True             # warm-up also fills every L1 to its eviction watermark (load.L1Filler)
    seed: int = 0
    rss: LeakRule = LeakRule(min_per_hour=30.0, min_growth=16.0)     # MiB of anonymous memory
    fds: LeakRule = LeakRule(min_per_hour=30.0, min_growth=8.0)
    threads: LeakRule = LeakRule(min_per_hour=30.0, min_growth=4.0)
    stale: LeakRule = LeakRule(min_per_hour=10.0, min_growth=2.0)    # P2P lookup jobs + read locks at the floor

    @classmethod
    def quick(cls, **kw) -> "SoakOptions":
        base = dict(duration_s=180.0, warmup_s=45.0, sample_every_s=5.0, proof_every_s=60.0, fill_l1=False)
        return cls(**{**base, **kw})

    def validate(self) -> None:
        if not 30 <= self.duration_s <= 24 * 3600:
            raise BadInput(f"--duration {self.duration_s:g} s: use 30 s to 24 h")
        if self.warmup_s >= self.duration_s * 0.8:
            raise BadInput(f"--warmup {self.warmup_s:g} s: must leave at least a fifth of --duration "
                           f"({self.duration_s:g} s) for the slopes")
        if not 1 <= self.concurrency <= 64:
            raise BadInput(f"--concurrency {self.concurrency}: use 1..64")
