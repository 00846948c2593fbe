"""Which NICs moved a transfer's bytes: each node's rail counters (`diagnose.rails`) before and after one read
window, kept where they account for the window's bytes.

A window moves `reads x payload` bytes (warm-up and measured reads; verify checks the copy in place). A rail
"moved the bytes" when its delta in the direction of the flow (tx on the source, rx on the reader; either on a
node that is both, as on a local fleet's lo) reaches half of that: a shared interface's background traffic
cannot make an idle NIC look busy, and TCP's overhead can only add to the payload. Nodes behind the same
connector host are read once.
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence, TypeVar

from p2p_ops.connectors.local import LocalConnector
from p2p_ops.diagnose import rails as rail_counters

T = TypeVar("T")
SHARE = 0.5


def _hosts(sides: Mapping[str, Sequence[tuple[str, object]]]) -> dict[str, tuple[object, set[str], list[str]]]:
    out: dict[str, tuple[object, set[str], list[str]]] = {}
    for role, nodes in sides.items():
        for name, conn in nodes:
            # Every local connector is this machine, whatever node name it carries.
            key = "local" if isinstance(conn, LocalConnector) else f"{type(conn).__name__}:{conn.host}"
            entry = out.setdefault(key, (conn, set(), []))
            entry[1].add(role)
            if name not in entry[2]:
                entry[2].append(name)
    return out


def moved(usage: list[rail_counters.RailUsage], roles: set[str], nbytes: int) -> list[rail_counters.RailUsage]:
    def flow(u: rail_counters.RailUsage) -> int:
        return u.tx_bytes if roles == {"source"} else u.rx_bytes if roles == {"reader"} else max(u.rx_bytes, u.tx_bytes)
    return [u for u in usage if not u.reset and flow(u) >= SHARE * nbytes]


def measure(sides: Mapping[str, Sequence[tuple[str, object]]], nbytes: int, fn: Callable[[], T]) -> tuple[list[dict], T]:
    hosts = _hosts(sides)
    before = {k: rail_counters.read_snapshot(conn) for k, (conn, _, _) in hosts.items()}
    result = fn()
    rows = []
    for key, (conn, roles, names) in hosts.items():
        usage = rail_counters.diff(before[key], rail_counters.read_snapshot(conn))
        rows += [{"node": "=".join(names), "role": "+".join(sorted(roles)), "name": u.name, "kind": u.kind,
                  "tx_bytes": u.tx_bytes, "rx_bytes": u.rx_bytes} for u in moved(usage, roles, nbytes)]
    return rows, result


def one_host(sides: Mapping[str, Sequence[tuple[str, object]]]) -> bool:
    return len(_hosts(sides)) == 1


ONE_HOST_NOTE = ("no interface counted the bytes: source and reader are one host, where UCX moves them through "
                 "shared memory (sm/cma) unless UCX_TLS leaves only tcp")


def label(rails: list[dict]) -> str:
    return ", ".join(f"{r['node']} {r['name']}" for r in rails) or "none"
