"""Fleet doctor (`p2pctl doctor`): is this fleet able to share, and if not, which peer is wrong and how to fix it.

Two halves, so the judgement is testable without a fleet: `gather(ctx)` reads the fleet (impure, bounded; its
module says what it reads) into `FleetFacts` (`model`); `check(facts)` is pure and turns them into a
`findings.Report`. `peers` says what each peer uses for every must-agree key, and where it was read.

A stopped fleet gets the pre-launch checks (env.sh agreement, ports free). Exit codes come from the report:
0 healthy, 1 findings, 2 could not check. Add a check: a `_check_*` function over `FleetFacts`, called in
`check`, with a unit test on hand-built facts.
"""

from __future__ import annotations

from typing import Any

from p2p_ops.diagnose.doctor.checks import check, wide_binds
from p2p_ops.diagnose.doctor.gather import gather
from p2p_ops.diagnose.doctor.model import FleetFacts, InstanceFacts, NodeFacts, PlannedPort, Reach
from p2p_ops.diagnose.doctor.peers import observed, safe_env
from p2p_ops.diagnose.findings import Report
from p2p_ops.lifecycle.context import FleetContext

__all__ = ["FleetFacts", "InstanceFacts", "NodeFacts", "PlannedPort", "Reach", "check", "gather", "observed",
           "run", "safe_env", "summary_lines", "wide_binds"]


def run(ctx: FleetContext, reach: bool = True) -> tuple[FleetFacts, Report]:
    facts = gather(ctx, reach=reach)
    return facts, check(facts)


def summary_lines(report: Report) -> list[str]:
    """The report as text, with a per-instance table of what each peer uses."""
    table: dict[str, Any] = report.facts.get("instances") or {}
    keys = ("server", "p2p_state", "PYTHONHASHSEED", "chunk_size", "hash_algorithm", "l1_align_bytes", "model",
            "lmcache_version", "UCX_TLS")
    lines = [report.title]
    if table:
        rows = [("instance", *keys)] + [(inst, *(str(v) if (v := vals.get(k)) is not None else "-" for k in keys))
                                        for inst, vals in table.items()]
        widths = [min(28, max(len(r[c]) for r in rows)) for c in range(len(rows[0]))]
        lines += ["  " + " ".join(f"{cell[:w]:<{w}}" for cell, w in zip(r, widths)).rstrip() for r in rows]
    lines += report.render().splitlines()[1:]
    return lines
