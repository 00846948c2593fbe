"""UCX log lines and endpoint-configuration lines, one line at a time.

UCX formats a line as `[ts] [host:pid:thr] file.c:line UCX LEVEL message`, pads columns differently across
versions, prints tables as bare `[ts] [host:pid:thr]   | ... |` rows, and has a fatal form without a
timestamp (`[host:pid:thr:tid] file.c:line message`). Whitespace is matched loosely throughout.

Endpoint-configuration lines (UCX_LOG_LEVEL=info) say which lanes each operation kind uses::

    ucp_worker.c:1997 UCX  INFO    B intra-node cfg#1 rma_am(tcp/lo)  amo_am(tcp/lo)  am(tcp/lo cma/memory)
    ucp_worker.c:1763 UCX  INFO    ep_cfg[0]: tag(self/memory0 cma/memory)              (UCX <= 1.14)

`rma(rc_mlx5/mlx5_0:1)` means the payload moves by RDMA; `rma_am(tcp/eth0)` means RMA is emulated over
active messages, i.e. not RDMA.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_PREFIX = r"^\[(?P<ts>\d+\.\d+)\]\s+\[(?P<host>[^:\]]+):(?P<pid>\d+)\s*:(?P<thr>\w+)\]\s+"
_NORMAL = re.compile(_PREFIX + r"(?P<file>[\w.+-]+):(?P<line>\d+)\s+UCX\s+(?P<level>[A-Z]+)\s+(?P<msg>.*)$")
_ROW = re.compile(_PREFIX + r"(?P<row>[|+].*)$")
_FATAL = re.compile(
    r"^\[(?P<host>[^:\]]+):(?P<pid>\d+)\s*:(?P<thr>\d+):(?P<tid>\d+)\]\s+(?P<file>[\w.+-]+):(?P<line>\d+)\s+"
    r"(?P<msg>.*)$"
)
# A table row inside `ucx_info -e` output, which re-prints the tables behind `# `.
_COMMENT_ROW = re.compile(r"^#\s(?P<row>[|+].*)$")
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
    m = _NORMAL.match(text)
    if m:
        return LogLine("log", m["host"], int(m["pid"]), float(m["ts"]), m["file"], int(m["line"]),
                       m["level"], m["msg"].strip())
    m = _ROW.match(text)
    if m:
        return LogLine("row", m["host"], int(m["pid"]), float(m["ts"]), message=m["row"].strip())
    m = _FATAL.match(text)
    if m:
        return LogLine("fatal", m["host"], int(m["pid"]), None, m["file"], int(m["line"]), "FATAL",
                       m["msg"].strip())
    m = _COMMENT_ROW.match(text)
    if m:
        return LogLine("row", message=m["row"].strip())
    return None


@dataclass
class EpConfig:
    cfg: str
    context: str = ""
    locality: str = ""
    kinds: dict[str, list[str]] = field(default_factory=dict)
    host: str = ""
    pid: int = 0

    @property
    def name(self) -> str:
        """The name PROTO_INFO tables use for this configuration (`B intra-node cfg#1`, `ep_cfg[0]`)."""
        return " ".join(p for p in (self.context, self.locality, self.cfg) if p)

    @property
    def lanes(self) -> list[str]:
        return list(dict.fromkeys(lane for lanes in self.kinds.values() for lane in lanes))


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
