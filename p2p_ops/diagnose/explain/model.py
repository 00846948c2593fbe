"""What `explain` knows and what it concludes: per instance what its server uses and sees, per chunk a verdict.

`gather.py` fills `ExplainFacts` (impure, read-only; defined with `InstanceView` and `ChunkVerdict` by their judge,
`judge/chunk.py`); `answer.py` turns them into an `Explanation` (pure): every verdict is tested on hand-built facts.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Optional

from p2p_ops.causes import Verdict
from p2p_ops.diagnose.judge.views import HIT, PARTIAL, PULL, RECOMPUTE, ChunkVerdict

# One character per chunk in the strip.
STRIP = {HIT: "H", PULL: "P", RECOMPUTE: "x", PARTIAL: "."}


@dataclass
class NodeExplanation:
    instance: str
    node: str
    chunk_size: Optional[int]
    tokens: int
    chunks: list[ChunkVerdict] = field(default_factory=list)
    verdict: str = ""                   # one line: what a request would do, and why it misses
    causes: list[Verdict] = field(default_factory=list)  # its misses' and risks' causes, first miss first
    notes: list[str] = field(default_factory=list)

    @property
    def reasons(self) -> list[str]:
        """The distinct miss reasons (cause ids), in chunk order."""
        return list(dict.fromkeys(v.id for v in self.causes))

    @property
    def strip(self) -> str:
        return "".join(STRIP[c.action] for c in self.chunks)

    def count(self, action: str) -> int:
        return sum(1 for c in self.chunks if c.action == action)


@dataclass
class Explanation:
    fleet: str
    runtime: str
    prompt: str
    nodes: list[NodeExplanation] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)    # where the evidence came from, and what was left out
    differences: list[str] = field(default_factory=list)   # key inputs that differ between instances
    timings: dict[str, float] = field(default_factory=dict)   # seconds per phase of the gather

    @property
    def misses(self) -> bool:
        return any(c.action == RECOMPUTE for n in self.nodes for c in n.chunks)

    def to_dict(self) -> dict:
        data = asdict(self)
        for node, out in zip(self.nodes, data["nodes"]):
            out |= {"strip": node.strip, "reasons": node.reasons, "causes": [v.to_dict() for v in node.causes]}
            for c, chunk in zip(node.chunks, out["chunks"]):
                chunk["cause"] = c.cause.to_dict() if c.cause else None
        return data
