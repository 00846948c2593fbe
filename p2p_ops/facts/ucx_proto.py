"""`UCX_PROTO_INFO=y` tables: which protocol and lanes UCX uses per operation and message size.

Three layouts exist, all bare `|`-rows in the log (one stream per host:pid):

- UCX 1.13: a 2-cell header `| 0x55a1.. ep_cfg[0] | remote memory write by ucp_put*() ... |`, then 3-cell rows.
- UCX ~1.15-1.19: the same with `| perftest inter-node cfg#2 | remote memory read by ucp_get*(multi) ... |`.
- UCX 1.23 (inside NIXL 1.5.1): two 1-cell header rows (`| B self cfg#0 |`, then the operation), a
  `| Range | Description | Config |` title row, then 3-cell rows.

Lane cells are `tl/dev[:port][/pathN]`, or `50% on A and 50% on B`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable

from p2p_ops.facts.ucx_log import split_lane

_ENDPOINT = re.compile(r"(?:cfg#\d+|ep_cfg\[\d+\])$")
_SHARE = re.compile(r"^(?P<pct>\d+)% on (?P<lane>\S+)$")
_TITLE = ["Range", "Description", "Config"]


@dataclass
class ProtoRow:
    range: str
    protocol: str
    lanes: list[str]
    shares: list[int] = field(default_factory=list)
    estimated: bool = False

    @property
    def emulated(self) -> bool:
        return "software emulation" in self.protocol


@dataclass
class ProtoTable:
    endpoint: str
    operation: str = ""
    rows: list[ProtoRow] = field(default_factory=list)
    host: str = ""
    pid: int = 0

    @property
    def endpoint_id(self) -> str:
        """The endpoint name without the 1.13 worker address, so it joins with `ep_cfg[0]:` log lines."""
        return re.sub(r"^0x[0-9a-f]+\s+", "", self.endpoint)

    def key(self) -> tuple:
        return (self.host, self.pid, self.endpoint, self.operation,
                tuple((r.range, r.protocol, tuple(r.lanes)) for r in self.rows))


def parse_lanes(cell: str) -> tuple[list[str], list[int]]:
    """`50% on rc_mlx5/mlx5_0:1 and 50% on rc_mlx5/mlx5_1:1` -> (lanes, [50, 50]); plain cells give no shares."""
    lanes, shares = [], []
    for part in cell.split(" and "):
        part = part.strip()
        m = _SHARE.match(part)
        lane = m["lane"] if m else part
        if not lane:
            continue
        transport, device = split_lane(lane)
        lanes.append(f"{transport}/{device}" if device else transport)
        if m:
            shares.append(int(m["pct"]))
    return lanes, shares


def _cells(row: str) -> list[str]:
    return [c.strip() for c in row.strip().strip("|").split("|")]


def table_endpoint(row: str) -> str | None:
    """The endpoint a table's first row names (`| B self cfg#0 |`, `| ep_cfg[0] | <operation> |`), else None."""
    cells = _cells(row)
    return cells[0] if not row.startswith("+") and len(cells) <= 2 and _ENDPOINT.search(cells[0]) else None


def parse_proto_tables(rows: Iterable[str], host: str = "", pid: int = 0) -> list[ProtoTable]:
    """The tables among one stream's `|`-rows, in order; a table with no row of ranges is left out."""
    tables: list[ProtoTable] = []
    for row in rows:
        cells = _cells(row)
        current = tables[-1] if tables else None
        if table_endpoint(row):
            tables.append(ProtoTable(cells[0], cells[1] if len(cells) == 2 else "", host=host, pid=pid))
        elif row.startswith("+") or current is None:
            continue
        elif len(cells) == 1 and not current.operation:
            current.operation = cells[0]
        elif len(cells) == 3 and cells != _TITLE:
            lanes, shares = parse_lanes(cells[2])
            current.rows.append(ProtoRow(cells[0], cells[1].removeprefix("(?)").strip(), lanes, shares,
                                         cells[1].startswith("(?)")))
    return [t for t in tables if t.rows]
