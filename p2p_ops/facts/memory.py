"""`/proc/meminfo`'s MemTotal and MemAvailable: `p2pctl init --local N` sizes each node's L1 and engine KV from
them (spec.sizing).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from p2p_ops.facts.base import CommandFact


@dataclass(frozen=True)
class Memory:
    total_bytes: int
    available_bytes: int


def parse_meminfo(text: str) -> Optional[Memory]:
    """None when either line is missing (not Linux, or /proc not mounted)."""
    kib = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if name in ("MemTotal", "MemAvailable") and parts and parts[0].isdecimal():
            kib[name] = int(parts[0])
    return Memory(kib["MemTotal"] * 1024, kib["MemAvailable"] * 1024) if len(kib) == 2 else None


MEMINFO: CommandFact[Optional[Memory]] = CommandFact("meminfo", ("cat", "/proc/meminfo"), parse_meminfo)
