"""The one vocabulary of causes: every cause any verb names, once, with what it means, its one fix (placeholders
for what it names), the fix's scope and how specific its evidence is (`rank`); and the verdict a verb gives.

The catalogue is data in three parts (`fleet`, `transport`, `cache`); the judge (`diagnose/judge/`) decides
which cause applies, the doctor, the decision tree, `rdma`, the NIXL failure rules and the preflight name their
findings by id, and every verb's --json carries the verdict (`Verdict.to_dict`). Every layer may name a cause,
so this sits at the floor and imports nothing of ours.

    verdict("chunk_size_differs", "node-c-0", ("doctor:agree:chunk_size", "node-a-0=256, node-c-0=512"),
            want=256, restart="p2pctl down --node node-c ...")
"""

from __future__ import annotations

from typing import Union

from p2p_ops.causes import cache, fleet, transport
from p2p_ops.causes.verdict import SCOPES, Cause, Evidence, Verdict, fill, restart, template

__all__ = ["CAUSES", "SCOPES", "Cause", "Evidence", "Verdict", "markdown", "rank_key", "restart", "template",
           "verdict"]

CAUSES: dict[str, Cause] = {}
for _c in (*fleet.CAUSES, *transport.CAUSES, *cache.CAUSES):
    if _c.id in CAUSES:
        raise ValueError(f"cause {_c.id} is in the catalogue twice")
    CAUSES[_c.id] = _c


def verdict(cause: str, subject: str, *evidence: Union[Evidence, tuple[str, str]], **values: object) -> Verdict:
    """The verdict of `cause` about `subject`, its fix filled with `values` (and {subject}); a cause outside the
    catalogue is a bug, refused here."""
    c = CAUSES.get(cause)
    if c is None:
        raise KeyError(f"{cause!r} is not a cause of the catalogue (p2p_ops/causes/)")
    seen = tuple(e if isinstance(e, Evidence) else Evidence(*e) for e in evidence)
    return Verdict(cause, subject, seen, fill(c.fix, {"subject": subject, **values}), c.scope, c.confirmed)


def rank_key(v: Verdict, error: bool = True) -> tuple[int, bool, bool]:
    """The one ranking of candidates, for the fleet judge, the decision tree and the benchmark alike (sort with
    it; the sort is stable, so the caller's order breaks the last ties): the most specific evidence first, a
    confirmed cause before one only seen, an error before a warning."""
    return (-CAUSES[v.id].rank, not v.confirmed, not error)


def markdown() -> str:
    """The table of every cause, for the diagnose skill's references/causes.md (a unit test keeps it current)."""
    def cell(text: str) -> str:
        return text.replace("|", "\\|")
    return "\n".join(["| id | scope | means | fix |", "|---|---|---|---|"] + [
        f"| `{c.id}` | {c.scope} | {cell(c.means)}{'' if c.confirmed else ' (confirms no reason)'} | "
        f"{cell(template(c.fix))} |" for c in CAUSES.values()]) + "\n"
