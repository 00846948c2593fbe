"""Summarise UCX and NIXL logs: per endpoint, which transports and lanes carry what; plus grouped errors.

Input is any mix of UCX log lines, endpoint-configuration lines, PROTO_INFO tables (old and new layouts), `ucx_info
-e` dumps, NIXL core/Python lines and tracebacks. Lines that are none of these are skipped.

The payload verdict prefers the PROTO_INFO row for the largest READ/WRITE messages (what a KV chunk uses), and
falls back to the `rma(...)` / `rma_am(...)` groups of the endpoint-configuration line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from p2p_ops.facts.ucx_info import RDMA_TRANSPORTS
from p2p_ops.facts.ucx_log import (
    ProtoTable, parse_ep_config, parse_log_line, parse_nixl_line, parse_proto_tables, split_lane, table_endpoint,
)

_SHM = ("cma", "sysv", "posix", "knem", "xpmem", "mm", "self")
_GPU = ("cuda", "gdr", "rocm", "ze")
_ERROR_LEVELS = {"FATAL": 0, "ERROR": 1, "WARN": 2, "DIAG": 3}
_VERSION = re.compile(r"^Version (\d+\.\d+\.\d+)")
_ENV = re.compile(r"^UCX_\* env variables?: (.*)$")
_AGENT = re.compile(r"Initialized NIXL agent: (\S+)")
_DATA_OPS = ("ucp_get", "ucp_put", "rendezvous data")
# `ucx_info -e` endpoint dump: `lane[1]:  5:cma/memory.0 md[4]  -> md[4]/cma/sysdev[255] rma_bw#0`
_DUMP_LANE = re.compile(r"^#\s+lane\[\d+\]:\s+\d+:(?P<lane>\S+?)\.\d+\s")


def dump_lane(line: str) -> tuple[str, str] | None:
    """(lane, uses) of a `ucx_info -e` lane line. What follows its last `->` is split, not matched by a regex:
    `.*->` followed by more patterns backtracks over every `->` of the line (22 s for one crafted line)."""
    m = _DUMP_LANE.match(line)
    before, arrow, after = line[m.end():].rpartition("->") if m else ("", "", "")
    target_uses = after.split(None, 1)
    return (m["lane"], target_uses[1]) if m and arrow and len(target_uses) == 2 else None


def lane_class(lane: str) -> str:
    transport = split_lane(lane)[0]
    if transport == "tcp":
        return "tcp"
    if transport.startswith(RDMA_TRANSPORTS):
        return "rdma"
    if transport.startswith(_SHM):
        return "shm"
    return "gpu" if transport.startswith(_GPU) else "other"


@dataclass
class ErrorGroup:
    source: str
    level: str
    message: str
    count: int = 0
    first_seen: str = ""


@dataclass
class EndpointSummary:
    name: str
    host: str = ""
    pid: int = 0
    kinds: dict[str, list[str]] = field(default_factory=dict)
    tables: list[ProtoTable] = field(default_factory=list)
    payload_class: str = ""
    payload_lanes: list[str] = field(default_factory=list)
    emulated: bool = False
    payload_source: str = ""

    @property
    def lanes(self) -> list[str]:
        return sorted({lane for lanes in self.kinds.values() for lane in lanes})

    @property
    def transports(self) -> list[str]:
        table_lanes = [lane for t in self.tables for r in t.rows for lane in r.lanes]
        return sorted({split_lane(lane)[0] for lane in self.lanes + table_lanes})


@dataclass
class TraceSummary:
    ucx_versions: list[str] = field(default_factory=list)
    ucx_env: dict[str, str] = field(default_factory=dict)
    nixl_ucx_config: dict[str, str] = field(default_factory=dict)
    nixl_agents: list[str] = field(default_factory=list)
    exceptions: list[str] = field(default_factory=list)
    endpoints: list[EndpointSummary] = field(default_factory=list)
    errors: list[ErrorGroup] = field(default_factory=list)
    lines_read: int = 0
    lines_understood: int = 0

    @property
    def transports(self) -> list[str]:
        return sorted({t for ep in self.endpoints for t in ep.transports})


def normalise_message(message: str) -> str:
    """Collapse per-run noise (addresses, pointers) so equal errors group together."""
    message = re.sub(r"0x[0-9a-fA-F]+", "0x?", message)
    return re.sub(r"\s+", " ", message).strip()


def _from_table(ep: EndpointSummary, table: ProtoTable) -> None:
    row = table.rows[-1]  # the largest messages
    ep.payload_lanes, ep.emulated = row.lanes, row.emulated
    ep.payload_source = f"PROTO_INFO: {table.operation} | {row.range} | {row.protocol}"


def _payload(ep: EndpointSummary) -> None:
    # READ is what a P2P pull uses; fall back to WRITE, then to any data table.
    data_tables = sorted((t for t in ep.tables if any(op in t.operation for op in _DATA_OPS)),
                         key=lambda t: ("ucp_get" not in t.operation, "ucp_put" not in t.operation))
    rma = next((kind for kind in ("rma", "rma_bw") if kind in ep.kinds), None)
    if data_tables:
        _from_table(ep, data_tables[0])
    elif rma:
        ep.payload_lanes, ep.payload_source = ep.kinds[rma], f"ep config {rma}(...)"
    elif "rma_am" in ep.kinds:
        ep.payload_lanes, ep.emulated = ep.kinds.get("am", ep.kinds["rma_am"]), True
        ep.payload_source = "ep config rma_am(...): RMA emulated over active messages"
    elif ep.tables:
        _from_table(ep, ep.tables[0])
    elif "tag" in ep.kinds:
        ep.payload_lanes, ep.payload_source = ep.kinds["tag"], "ep config tag(...)"
    ep.payload_class = "+".join(sorted({lane_class(lane) for lane in ep.payload_lanes}))


class _Collector:
    def __init__(self) -> None:
        self.summary = TraceSummary()
        self.eps: dict[tuple, EndpointSummary] = {}
        self.rows: dict[tuple[str, int], list[str]] = {}
        self.errors: dict[tuple[str, str, str], ErrorGroup] = {}
        self.stream = ("", 0)
        self.last_endpoint: dict[tuple[str, int], str] = {}
        self.table: dict[tuple[str, int], str] = {}  # the endpoint of each stream's current PROTO_INFO table

    def error(self, source: str, level: str, message: str, where: str) -> None:
        key = (source, level, normalise_message(message))
        self.errors.setdefault(key, ErrorGroup(source, level, key[2], 0, where)).count += 1

    def endpoint(self, host: str, pid: int, name: str) -> EndpointSummary:
        return self.eps.setdefault((host, pid, name), EndpointSummary(name, host, pid))

    def ucx(self, line, where: str) -> None:
        if line.kind == "row":
            self.stream = stream = line.stream if line.host else self.stream
            self.rows.setdefault(stream, []).append(line.message)
            if endpoint := table_endpoint(line.message):
                self.table[stream] = ProtoTable(endpoint).endpoint_id
            if stream in self.table:  # a row of the stream's current table: its endpoint again
                self.last_endpoint[stream] = self.table[stream]
            return
        self.stream = line.stream
        msg = line.message
        if line.level in _ERROR_LEVELS:
            self.error("ucx", line.level, msg, where)
        ep = parse_ep_config(msg) if line.level == "INFO" else None
        if ep:
            self.endpoint(line.host, line.pid, ep.name).kinds.update(ep.kinds)
            self.last_endpoint[line.stream] = ep.name
        elif (m := _VERSION.match(msg)) and m[1] not in self.summary.ucx_versions:
            self.summary.ucx_versions.append(m[1])
        elif m := _ENV.match(msg):
            self.summary.ucx_env.update(kv.partition("=")[::2] for kv in m[1].split() if "=" in kv)

    def dump_lane(self, lane: str, uses: str) -> None:
        """A lane from a `ucx_info -e` dump; it belongs to the endpoint this stream printed last."""
        name = self.last_endpoint.get(self.stream, "ucx_info endpoint")
        kinds = self.endpoint(*self.stream, name).kinds
        for use in uses.split():
            lanes = kinds.setdefault(use.split("#")[0], [])
            if lane not in lanes:
                lanes.append(lane)

    def nixl(self, line, where: str) -> None:
        if line.level in _ERROR_LEVELS:
            self.error("nixl", line.level, line.message, where)
        if line.exception and line.exception[1] not in self.summary.exceptions:
            self.summary.exceptions.append(line.exception[1])
        if line.modified_ucx_config:
            self.summary.nixl_ucx_config.__setitem__(*line.modified_ucx_config)
        if (agent := _AGENT.search(line.message)) and agent[1] not in self.summary.nixl_agents:
            self.summary.nixl_agents.append(agent[1])

    def finish(self) -> TraceSummary:
        seen = set()
        for stream, rows in self.rows.items():
            for table in parse_proto_tables(rows, *stream):
                if table.key() in seen:
                    continue  # perftest and `ucx_info -e` print the same table more than once
                seen.add(table.key())
                self.endpoint(table.host, table.pid, table.endpoint_id).tables.append(table)
        for ep in self.eps.values():
            _payload(ep)
        self.summary.endpoints = sorted(self.eps.values(), key=lambda e: (e.host, e.pid, e.name))
        self.summary.errors = sorted(self.errors.values(), key=lambda g: (_ERROR_LEVELS.get(g.level, 9), -g.count))
        return self.summary


def parse_trace(text: str, source: str = "<input>") -> TraceSummary:
    return parse_traces([(source, text)])


def parse_traces(named_texts: list[tuple[str, str]]) -> TraceSummary:
    """Summarise several log texts as one (a stream is a host:pid, whichever file its lines are in)."""
    col = _Collector()
    for source, text in named_texts:
        for number, raw in enumerate(text.splitlines(), 1):
            col.summary.lines_read += 1
            where = f"{source}:{number}"
            if (ucx := parse_log_line(raw)) is not None:
                col.ucx(ucx, where)
            elif (nixl := parse_nixl_line(raw)) is not None:
                col.nixl(nixl, where)
            elif dump := dump_lane(raw):
                col.dump_lane(*dump)
            else:
                continue
            col.summary.lines_understood += 1
    return col.finish()
