"""Eviction under a working set twice the fleet's L1, at a real profile: hit ratio per pass, and no failed request.

A two-node local fleet at llama-3-8b's geometry (128 KiB per token) with 1 GiB of L1 per server. Each document is
computed on A and asked on B (B pulls it from A), so every document lives in both L1s; the documents together
hold twice the fleet's L1, so LMCache must evict (from 80 % of L1 unless the server says otherwise) while the
load goes on. Pass 1 is cold; later passes ask the same documents in a shuffled order and show what eviction
left: the hit ratio is cached prompt tokens over prompt tokens, per engine. Every request must still be served
(a miss recomputes).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from p2p_ops.lifecycle import launch
from p2p_ops.lifecycle.free_ports import choose
from p2p_ops.spec.starter import local_fleet
from p2p_ops.harness import prompts
from p2p_ops.harness.openai_client import complete
from p2p_ops.spec.sizing import GIB
from p2p_runtime.profiles import PROFILES

PROFILE = "llama-3-8b"
L1_GIB = 1
DOC_TOKENS = {"tiny": 512, "quick": 1024, "full": 1024}
PASSES = {"tiny": 2, "quick": 2, "full": 3}
WORKING_SET = 2.0  # times the fleet's L1 (the sum of its servers')


@dataclass
class Pass:
    number: int
    sent: int = 0
    failed: int = 0
    prompt_tokens: dict[str, int] = field(default_factory=lambda: {"A": 0, "B": 0})
    cached_tokens: dict[str, int] = field(default_factory=lambda: {"A": 0, "B": 0})
    first_error: str = ""

    def add(self, side: str, c) -> None:
        self.sent += 1
        if not c.ok:
            self.failed += 1
            self.first_error = self.first_error or c.error[:160]
            return
        self.prompt_tokens[side] += c.prompt_tokens
        self.cached_tokens[side] += c.cached_tokens

    def hit_ratio(self, side: str) -> float | None:
        return self.cached_tokens[side] / self.prompt_tokens[side] if self.prompt_tokens[side] else None


def documents_for(fleet_l1_bytes: int, bytes_per_token: int, doc_tokens: int) -> int:
    """How many documents of doc_tokens hold WORKING_SET times the fleet's L1."""
    return math.ceil(WORKING_SET * fleet_l1_bytes / (doc_tokens * bytes_per_token))


def run(report) -> None:
    t = report.table("eviction", f"Working set {WORKING_SET:.0f}x the fleet's L1 ({PROFILE}, {L1_GIB} GiB L1 per "
                                 "server): hit ratio per pass", ["pass", "documents", "GiB asked", "sent", "failed",
                                                                 "hit ratio A", "hit ratio B", "first error"])
    profile = PROFILES[PROFILE]
    doc_tokens = DOC_TOKENS[report.size]
    n_docs = documents_for(2 * L1_GIB * GIB, profile.bytes_per_token, doc_tokens)
    data = local_fleet(2, name="bench-evict", base=choose(2).base, profile=PROFILE)
    data["settings"]["l1_size_gb"] = L1_GIB
    with launch.temporary(data) as ctx:
        (na, ia), (nb, ib) = ctx.fleet.instances()[:2]
        urls = {"A": ctx.engine_url(na, ia), "B": ctx.engine_url(nb, ib)}
        docs = [prompts.sized_document(urls["A"], ctx.fleet.model, 4242, i, doc_tokens)[0] for i in range(n_docs)]
        order = list(range(n_docs))
        for number in range(1, PASSES[report.size] + 1):
            p = Pass(number)
            for i in order:
                for side in ("A", "B"):
                    p.add(side, complete(urls[side], ctx.fleet.model, docs[i], max_tokens=1, timeout=120))
            _row(report, t, p, n_docs, n_docs * doc_tokens * profile.bytes_per_token / GIB)
            random.Random(number).shuffle(order)
    report.note(t, "pass 1 is cold (A computes, B pulls from A); later passes ask the same documents shuffled. B asks "
                   "right after A, so B's hits are pulls of what A has just stored (P2P under eviction); A's ratio is "
                   "what eviction left of the working set")
    _target(report)


def _row(report, t, p: Pass, n_docs: int, gib: float) -> None:
    report.add_row(t, **{"pass": p.number, "documents": n_docs, "GiB asked": gib, "sent": p.sent,
                         "failed": p.failed, "hit ratio A": p.hit_ratio("A"), "hit ratio B": p.hit_ratio("B"),
                         "first error": p.first_error or "-"})
    report.facts.setdefault("eviction", []).append({"sent": p.sent, "failed": p.failed})


def _target(report) -> None:
    rows = report.facts.get("eviction", [])
    sent, failed = sum(r["sent"] for r in rows), sum(r["failed"] for r in rows)
    report.target("no failed request under eviction pressure", "0 failed", f"{failed} of {sent} failed",
                  failed == 0 if sent else None)
