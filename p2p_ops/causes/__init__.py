"""The one vocabulary of causes: every cause any verb names, once, with what it means, its one fix (placeholders
for what it names), the fix's scope and how specific its evidence is (`rank`); and the verdict a verb gives.

The catalogue is data (`catalogue.yaml`); the judge (`diagnose/judge/`) decides which cause applies, the doctor, the
decision tree, `rdma`, the NIXL failure rules and the preflight name their findings by id, and every verb's --json
carries the verdict (`Verdict.to_dict`). Every layer may name a cause, so this sits at the floor.

    verdict("chunk_size_differs", "node-c-0", ("doctor:agree:chunk_size", "node-a-0=256, node-c-0=512"),
            want=256, restart="p2pctl down --node node-c ...")
"""

from __future__ import annotations

import re
from importlib import resources
from typing import Union

import yaml

from p2p_ops.causes.verdict import SCOPES, Cause, Evidence, Verdict, fill, restart, template

__all__ = ["CAUSES", "SCOPES", "Cause", "Evidence", "Verdict", "rank_key", "restart", "template", "verdict"]


def _catalogue(text: str) -> dict[str, Cause]:
    data = yaml.safe_load(text)
    if len(data) != len(re.findall(r"^\w+:", text, flags=re.M)):
        raise ValueError("a cause is in the catalogue twice")
    return {k: Cause(k, **v) for k, v in data.items()}


CAUSES = _catalogue(resources.files(__name__).joinpath("catalogue.yaml").read_text(encoding="utf-8"))


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
