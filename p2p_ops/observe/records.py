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


# How each column that is not text is read; text values are shared between records.
_READ = {"level": int, "t_start_s": float, "prompt_tokens": int, "cached_tokens": int, "output_tokens": int,
         "e2e_s": float, "ok": lambda v: v == "True",
         "ttft_s": lambda v: float(v) if v not in ("", "None") else None}


def read_csv(path: Path, within: Path | None = None) -> list[RequestRecord]:
    """The records of a requests.csv (`files.read_text`: a regular file, inside `within` when given); a row missing
    a column (but url and retried, which older runs lack) or holding a non-number raises KeyError/ValueError."""
    out, same = [], {}
    for row in csv.DictReader(io.StringIO(files.read_text(path, CSV_CAP, within=within), newline="")):
        values = {k: (row.get(k) or "") if k in ("url", "retried") else row[k] for k in FIELDS}
        out.append(RequestRecord(**{k: _READ[k](v) if k in _READ else same.setdefault(v, v)
                                    for k, v in values.items()}))
    return out
