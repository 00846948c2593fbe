"""One row per request, written as CSV: the raw evidence every table and plot is computed from (stress, soak and
faults write the same columns; `harness.load` makes the rows)."""

from __future__ import annotations

import csv
import io
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Optional, Sequence

from p2p_ops import files


@dataclass(slots=True)
class RequestRecord:
    stage: str
    level: int                 # concurrency level (ladder) or requests in flight (other stages)
    instance: str              # engine that served it
    node: str
    warmer: str                # instance that first computed its prefix ("" = no shared prefix)
    prefix_id: str
    t_start_s: float           # seconds since the run started
    prompt_tokens: int
    cached_tokens: int
    output_tokens: int
    ttft_s: Optional[float]
    e2e_s: float
    ok: bool
    error: str = ""
    url: str = ""              # where it was sent (an engine or the router)
    retried: str = ""          # the connection reset that was retried once (faults), "" when none

    @property
    def t_end_s(self) -> float:
        return self.t_start_s + self.e2e_s

    @property
    def cross_node(self) -> bool:
        return bool(self.warmer) and self.warmer != self.instance


FIELDS = [f.name for f in fields(RequestRecord)]


def write_csv(path: Path, rows: list, fields: Sequence[str] = FIELDS) -> None:
    """`rows` (requests by default; any dataclass with these `fields`) as CSV, a header first."""
    out = io.StringIO(newline="")
    w = csv.DictWriter(out, fieldnames=fields)
    w.writeheader()
    w.writerows(asdict(r) for r in rows)
    files.write_text(path, out.getvalue())


# The largest requests.csv a report reads (a 10-hour soak writes about 25 MB). Records are slotted and their
# repeated strings shared, so memory stays within a few times the file's size.
CSV_CAP = 64 << 20


def read_csv(path: Path, within: Path | None = None) -> list[RequestRecord]:
    """The records of a requests.csv (`files.read_text`: a regular file, inside `within` when given)."""
    return parse_csv(files.read_text(path, CSV_CAP, within=within))


def parse_csv(text: str) -> list[RequestRecord]:
    """Records from CSV text; a row missing a column or holding a non-number raises KeyError/ValueError."""
    out = []
    same: dict[str, str] = {}
    for row in csv.DictReader(io.StringIO(text, newline="")):
        s = {k: same.setdefault(v, v) for k, v in row.items() if k in _SHARED}
        out.append(RequestRecord(
            stage=s["stage"], level=int(row["level"]), instance=s["instance"], node=s["node"],
            warmer=s["warmer"], prefix_id=row["prefix_id"], t_start_s=float(row["t_start_s"]),
            prompt_tokens=int(row["prompt_tokens"]), cached_tokens=int(row["cached_tokens"]),
            output_tokens=int(row["output_tokens"]),
            ttft_s=float(row["ttft_s"]) if row["ttft_s"] not in ("", "None") else None,
            e2e_s=float(row["e2e_s"]), ok=row["ok"] == "True", error=s["error"], url=s.get("url") or "",
            retried=s.get("retried") or ""))
    return out


_SHARED = {"stage", "instance", "node", "warmer", "error", "url", "retried"}
