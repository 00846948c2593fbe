"""Rail check: which NICs carried the bytes of a transfer, from per-device counters before and after.

Counters (`snapshot(sysfs_root)`):

- RDMA ports (`/sys/class/infiniband/<dev>/ports/<n>/counters/port_{xmit,rcv}_data`) count octets divided by 4,
  so bytes = value x 4. They count RoCE traffic too; named `mlx5_0:1` (UCX_NET_DEVICES style).
- Network interfaces (`/sys/class/net/<if>/statistics/{tx,rx}_bytes`) for TCP. On mlx5 RoCE the offloaded RDMA
  traffic usually does *not* show here, so an RDMA rail is judged by its port counters.

`diff(before, after)` is pure; `assess(usage, expected)` flags an idle expected rail, traffic on an interface that
was not expected, imbalance across rails, and counters that went backwards. Snapshots serialise to JSON so they
can be taken on other nodes and compared here.
"""

from __future__ import annotations

import socket
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from p2p_ops.diagnose.findings import Report
from p2p_ops.facts.netdev import read_netdevs
from p2p_ops.facts.rail_counters import IB_WORD_BYTES, RAIL_COUNTERS
from p2p_ops.facts.sections import read_fact
from p2p_ops.facts.sysfs_ib import read_ib_devices


@dataclass
class RailUsage:
    """A rail's byte counters: since boot in a `Snapshot`, over a window in `diff`'s answer."""

    name: str
    kind: str  # "rdma" (an RDMA port) or "net" (a network interface)
    tx_bytes: int
    rx_bytes: int
    netdev: str = ""
    link_layer: str = ""
    reset: bool = False  # the counter went backwards in the window (reset or wrapped): its bytes are unknown

    @property
    def total(self) -> int:
        return self.tx_bytes + self.rx_bytes


@dataclass
class Snapshot:
    host: str
    taken_at: float
    counters: dict[str, RailUsage] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> Snapshot:
        """A snapshot's JSON (`to_dict`); anything of another shape is a ValueError naming the part."""
        if not isinstance(data, dict) or not isinstance(data.get("counters", {}), dict):
            raise ValueError('expected {"host": ..., "taken_at": ..., "counters": {NAME: {...}}} as written by '
                             "--save-snapshot")
        counters = {str(k): _counter(str(k), v) for k, v in data.get("counters", {}).items()}
        taken = data.get("taken_at", 0)
        if isinstance(taken, bool) or not isinstance(taken, (int, float)):
            raise ValueError(f"taken_at: {taken!r} is not a time in seconds")
        return cls(str(data.get("host", "")), float(taken), counters)


def _counter(name: str, value: Any) -> RailUsage:
    if not isinstance(value, dict):
        raise ValueError(f"counters.{name}: expected an object with name, kind, tx_bytes and rx_bytes")
    try:
        counter = RailUsage(**value)
    except TypeError as exc:
        raise ValueError(f"counters.{name}: {exc}") from None
    for key in ("tx_bytes", "rx_bytes"):
        number = getattr(counter, key)
        if isinstance(number, bool) or not isinstance(number, int):
            raise ValueError(f"counters.{name}.{key}: {number!r} is not a byte count")
    return counter


def snapshot(sysfs_root: Path = Path("/sys"), host: str | None = None) -> Snapshot:
    snap = Snapshot(host or socket.gethostname(), time.time())
    for dev in read_ib_devices(sysfs_root):
        for port in dev.ports:
            tx, rx = port.counters.get("port_xmit_data"), port.counters.get("port_rcv_data")
            if tx is None or rx is None:
                continue
            name = f"{dev.name}:{port.port}"
            snap.counters[name] = RailUsage(name, "rdma", tx * IB_WORD_BYTES, rx * IB_WORD_BYTES,
                                            next((g.ndev for g in port.gids if g.ndev), ""), port.link_layer)
    for nd in read_netdevs(sysfs_root):
        if nd.tx_bytes is not None and nd.rx_bytes is not None:
            snap.counters[nd.name] = RailUsage(nd.name, "net", nd.tx_bytes, nd.rx_bytes)
    return snap


def read_snapshot(conn, host: str = "") -> Snapshot:
    """The same counters read on any node through its connector (the `rail_counters` fact, one command)."""
    taken = time.time()
    counters = {n: RailUsage(n, c.kind, c.tx_bytes, c.rx_bytes) for n, c in read_fact(conn, RAIL_COUNTERS).items()}
    return Snapshot(host or conn.host, taken, counters)


def diff(before: Snapshot, after: Snapshot) -> list[RailUsage]:
    """Bytes per rail between two snapshots; a counter that went backwards is reported as `reset`, not negative."""
    usage = []
    for name, new in sorted(after.counters.items()):
        old = before.counters.get(name)
        if old is None:
            continue
        dtx, drx = new.tx_bytes - old.tx_bytes, new.rx_bytes - old.rx_bytes
        reset = dtx < 0 or drx < 0
        usage.append(RailUsage(name, new.kind, max(dtx, 0), max(drx, 0), new.netdev, new.link_layer, reset))
    return usage


def _matches(rail: RailUsage, wanted: str) -> bool:
    return wanted in (rail.name, rail.name.split(":")[0]) or (bool(rail.netdev) and wanted == rail.netdev)


def _fmt(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def assess(usage: list[RailUsage], expected: list[str] | None = None, min_bytes: int = 1 << 20,
           imbalance_ratio: float = 2.0) -> Report:
    report = Report("Rail check", source="rails")
    report.facts["rails"] = [dict(asdict(u), total=u.total) for u in usage if u.total or u.reset]
    for rail in (u for u in usage if u.reset):
        report.add("warn", "counter_reset", rail.name, "counter went backwards",
                   "counter reset or wrapped during the window; its bytes are unknown", "rail_counter_reset")
    if expected:
        for name in [e for e in expected if not any(_matches(u, e) for u in usage)]:
            report.add("error", "expected_rail", name, "not present",
                       "expected interface has no counters on this host", "rail_missing")
        rails = [u for u in usage if any(_matches(u, e) for e in expected)]
        for rail in usage:
            if rail not in rails and rail.total >= min_bytes:
                report.add("warn", "unexpected_rail", rail.name, _fmt(rail.total),
                           "traffic on an interface that is not an expected rail", "rail_imbalance",
                           rails=",".join(expected))
    else:
        rails = [u for u in usage if u.kind == "rdma"]
    _balance(report, rails, min_bytes, imbalance_ratio)
    return report


def _balance(report: Report, rails: list[RailUsage], min_bytes: int, ratio: float) -> None:
    total = sum(r.total for r in rails)
    if not rails:
        report.add("info", "traffic", "rails", "no RDMA ports and no --expect list",
                   "nothing to compare; pass the expected interfaces")
        return
    if total < min_bytes:
        report.add("warn", "traffic", "rails", _fmt(total), "expected rails carried (almost) nothing", "rails_idle")
        return
    report.add("info", "traffic", "rails", _fmt(total),
               ", ".join(f"{r.name} {_fmt(r.total)} ({100 * r.total / total:.0f}%)" for r in rails))
    heaviest = max(rails, key=lambda r: r.total)
    for rail in rails:
        if rail.total * ratio < heaviest.total:
            report.add("warn", "imbalance", rail.name, f"{_fmt(rail.total)} vs {_fmt(heaviest.total)} on "
                       f"{heaviest.name}", "rail carried far less than the busiest one", "rail_imbalance",
                       rails=",".join(r.name for r in rails))
