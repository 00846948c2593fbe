"""UCX log lines, endpoint-configuration lines and `UCX_PROTO_INFO=y` tables; NIXL log lines.

UCX formats a line as `[ts] [host:pid:thr] file.c:line UCX LEVEL message`, pads columns differently across
versions, prints tables as bare `[ts] [host:pid:thr]   | ... |` rows, and has a fatal form without a
timestamp (`[host:pid:thr:tid] file.c:line message`). Whitespace is matched loosely throughout.

Endpoint-configuration lines (UCX_LOG_LEVEL=info) say which lanes each operation kind uses::

    ucp_worker.c:1997 UCX  INFO    B intra-node cfg#1 rma_am(tcp/lo)  amo_am(tcp/lo)  am(tcp/lo cma/memory)
    ucp_worker.c:1763 UCX  INFO    ep_cfg[0]: tag(self/memory0 cma/memory)              (UCX <= 1.14)

`rma(rc_mlx5/mlx5_0:1)` means the payload moves by RDMA; `rma_am(tcp/eth0)` means RMA is emulated over
active messages, i.e. not RDMA.

PROTO_INFO tables say which protocol and lanes UCX uses per operation and message size. Three layouts exist,
all bare `|`-rows in the log (one stream per host:pid):

- UCX 1.13: a 2-cell header `| 0x55a1.. ep_cfg[0] | remote memory write by ucp_put*() ... |`, then 3-cell rows.
- UCX ~1.15-1.19: the same with `| perftest inter-node cfg#2 | remote memory read by ucp_get*(multi) ... |`.
- UCX 1.23 (inside NIXL 1.5.1): two 1-cell header rows (`| B self cfg#0 |`, then the operation), a
  `| Range | Description | Config |` title row, then 3-cell rows.

Lane cells are `tl/dev[:port][/pathN]`, or `50% on A and 50% on B`.

NIXL log lines come from the C++ core (glog style), the Python layer, vLLM's NIXL lines and exceptions::

    I0801 15:40:05.042247    1049 config.cpp:43] Modified UCX config: MAX_RMA_RAILS=2
    E [nixl_agent.cpp:484] registerMem: registration failed for the specified or all potential backends
    2026-11-30 01:21:46 NIXL INFO    _api.py:281 Initialized NIXL agent: A
    INFO 05-01 17:58:04 [nixl_utils.py:20] Setting UCX_RCACHE_MAX_UNRELEASED to '1024' ...
    nixl_cu12._bindings.nixlBackendError: NIXL_ERR_BACKEND
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable

_PREFIX = r"^\[(?P<ts>\d+\.\d+)\]\s+\[(?P<host>[^:\]]+):(?P<pid>\d+)\s*:(?P<thr>\w+)\]\s+"
_NORMAL = re.compile(_PREFIX + r"(?P<file>[\w.+-]+):(?P<line>\d+)\s+UCX\s+(?P<level>[A-Z]+)\s+(?P<msg>.*)$")
_ROW = re.compile(_PREFIX + r"(?P<msg>[|+].*)$")
_FATAL = re.compile(r"^\[(?P<host>[^:\]]+):(?P<pid>\d+)\s*:(?P<thr>\d+):(?P<tid>\d+)\]\s+(?P<file>[\w.+-]+):"
                    r"(?P<line>\d+)\s+(?P<msg>.*)$")
# A table row inside `ucx_info -e` output, which re-prints the tables behind `# `.
_COMMENT_ROW = re.compile(r"^#\s(?P<msg>[|+].*)$")
_EP_NEW = re.compile(r"^(?P<ctx>\S+)\s+(?P<loc>self|intra-node|inter-node|loopback)\s+(?P<cfg>cfg#\d+)\s+(?P<rest>.*)$")
_EP_OLD = re.compile(r"^(?P<cfg>ep_cfg\[\d+\]):\s*(?P<rest>.*)$")
# Lanes never hold parentheses: `[^()]` keeps an unclosed `a(a(a(...` line linear (`[^)]*` rescanned it to the
# end from every `(`).
_KIND = re.compile(r"(?P<kind>[a-z_]{1,40})\((?P<lanes>[^()]*)\)")


@dataclass
class LogLine:
    # `kind`: log, row (a table row) or fatal.
    kind: str
    host: str = ""
    pid: int = 0
    ts: float | None = None
    file: str = ""
    line: int = 0
    level: str = ""
    message: str = ""

    @property
    def stream(self) -> tuple[str, int]:
        return self.host, self.pid


def parse_log_line(text: str) -> LogLine | None:
    text = text.rstrip("\n")
    for kind, pattern in (("log", _NORMAL), ("row", _ROW), ("fatal", _FATAL), ("row", _COMMENT_ROW)):
        if m := pattern.match(text):
            g = {"host": "", "pid": "0", "ts": "", "file": "", "line": "0",
                 "level": "FATAL" if kind == "fatal" else "", **m.groupdict()}
            return LogLine(kind, g["host"], int(g["pid"]), float(g["ts"]) if g["ts"] else None, g["file"],
                           int(g["line"]), g["level"], g["msg"].strip())
    return None


@dataclass
class EpConfig:
    cfg: str
    context: str = ""
    locality: str = ""
    kinds: dict[str, list[str]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The name PROTO_INFO tables use for this configuration (`B intra-node cfg#1`, `ep_cfg[0]`)."""
        return " ".join(p for p in (self.context, self.locality, self.cfg) if p)


def parse_ep_config(message: str) -> EpConfig | None:
    m = _EP_NEW.match(message.strip()) or _EP_OLD.match(message.strip())
    if not m:
        return None
    g = m.groupdict()
    kinds = {k["kind"]: k["lanes"].split() for k in _KIND.finditer(g["rest"])}
    return EpConfig(g["cfg"], g.get("ctx", ""), g.get("loc", ""), kinds) if kinds else None


def split_lane(lane: str) -> tuple[str, str]:
    """`rc_mlx5/mlx5_0:1/path0` -> (`rc_mlx5`, `mlx5_0:1`); `tcp/lo` -> (`tcp`, `lo`)."""
    transport, _, device = lane.partition("/")
    device = re.sub(r"/path\d+$", "", device)
    return transport, device


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


_SEVERITY = {"I": "INFO", "W": "WARN", "E": "ERROR", "F": "FATAL", "WARNING": "WARN", "CRITICAL": "FATAL"}
_GLOG = re.compile(r"^(?P<level>[IWEF])(?P<md>\d{4}) (?P<t>\d\d:\d\d:\d\d\.\d+)\s+(?P<tid>\d+) "
                   r"(?P<file>[\w.+-]+):(?P<line>\d+)\] (?P<msg>.*)$")
_GLOG_SHORT = re.compile(r"^(?P<level>[IWEF]) \[(?P<file>[\w.+-]+):(?P<line>\d+)\] (?P<msg>.*)$")
_PYTHON = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)? NIXL (?P<level>[A-Z]+)\s+"
                     r"(?P<file>[\w.+-]+):(?P<line>\d+) (?P<msg>.*)$")
_VLLM = re.compile(r"^(?:\([^)]*\)\s*)?(?P<level>INFO|WARNING|ERROR|DEBUG|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? "
                   r"\[(?P<file>[\w.+-]+):(?P<line>\d+)\] (?P<msg>.*)$")
# Bounded: searched across whole lines, `nixl[A-Za-z]+` would rescan a run of letters from every `nixl` in it.
_EXCEPTION = re.compile(r"(?P<cls>nixl[A-Za-z]{1,60}Error): (?P<code>NIXL_ERR_[A-Z_]{1,60})")
_MODIFIED = re.compile(r"Modified UCX config: (?P<key>\w+)=(?P<value>\S*)")


@dataclass
class NixlLine:
    source: str
    level: str
    message: str
    file: str = ""
    line: int = 0
    tid: int = 0

    @property
    def exception(self) -> tuple[str, str] | None:
        return (m["cls"], m["code"]) if (m := _EXCEPTION.search(self.message)) else None

    @property
    def modified_ucx_config(self) -> tuple[str, str] | None:
        return (m["key"], m["value"]) if (m := _MODIFIED.search(self.message)) else None


def parse_nixl_line(text: str) -> NixlLine | None:
    text = text.rstrip("\n")
    for source, pattern in (("core", _GLOG), ("core", _GLOG_SHORT), ("python", _PYTHON), ("vllm", _VLLM)):
        m = pattern.match(text)
        # vLLM's format is every vLLM line's: only those that name NIXL are NIXL lines.
        if m and (source != "vllm" or "nixl" in m["file"].lower() or "nixl" in m["msg"].lower()):
            return NixlLine(source, _SEVERITY.get(m["level"], m["level"]), m["msg"], m["file"], int(m["line"]),
                            int(m.groupdict().get("tid") or 0))
    return NixlLine("exception", "ERROR", text.strip()) if _EXCEPTION.search(text) else None
