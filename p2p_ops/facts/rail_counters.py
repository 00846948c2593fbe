"""Byte counters of every rail on a node in one read: network interfaces (`/proc/net/dev`) and RDMA ports.

`/proc/net/dev` is the reading process's network namespace, so over SSH into a netns host it shows that host's
own interfaces. RDMA ports count octets divided by 4 (`counters/port_{xmit,rcv}_data`): bytes = value x 4, named
`mlx5_0:1` (UCX_NET_DEVICES style).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from p2p_ops.facts.base import CommandFact

IB_WORD_BYTES = 4
_IB = "/sys/class/infiniband/*/ports/*/counters"
# grep -H prints `path:value`; a host without RDMA has no such files (grep's exit 2 is not an error here).
RAIL_COUNTERS_SH = f"cat /proc/net/dev; grep -H . {_IB}/port_xmit_data {_IB}/port_rcv_data 2>/dev/null; true"
_IB_LINE = re.compile(r"^/sys/class/infiniband/([^/]+)/ports/(\d+)/counters/port_(xmit|rcv)_data:(\d+)$")


@dataclass
class RailBytes:
    name: str
    kind: str  # "net" (an interface) or "rdma" (an RDMA port)
    tx_bytes: int = 0
    rx_bytes: int = 0


def _netdev_line(line: str) -> RailBytes | None:
    """`  eth0: RX bytes packets ... (8 fields) TX bytes ...`; the header lines have no numbers after the colon."""
    name, sep, rest = line.partition(":")
    fields = rest.split()
    if not sep or len(fields) < 16 or not all(f.isdecimal() for f in (fields[0], fields[8])):
        return None
    return RailBytes(name.strip(), "net", int(fields[8]), int(fields[0]))


def parse_rail_counters(text: str) -> dict[str, RailBytes]:
    out: dict[str, RailBytes] = {}
    for line in text.splitlines():
        if m := _IB_LINE.match(line.strip()):
            rail = out.setdefault(f"{m[1]}:{m[2]}", RailBytes(f"{m[1]}:{m[2]}", "rdma"))
            setattr(rail, "tx_bytes" if m[3] == "xmit" else "rx_bytes", int(m[4]) * IB_WORD_BYTES)
        elif (net := _netdev_line(line)) is not None:
            out[net.name] = net
    return out


RAIL_COUNTERS = CommandFact("rail_counters", ("sh", "-c", RAIL_COUNTERS_SH), parse_rail_counters)
