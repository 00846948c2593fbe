"""Network interfaces from `/sys/class/net/<if>`. `virtual`: no `device` link (lo, bridges, veth, ifb), so it
cannot be a NIC rail.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from p2p_ops.facts.base import CommandFact, entries, read_int, read_sysfs


@dataclass
class NetDev:
    name: str
    operstate: str = ""
    mtu: int | None = None
    numa_node: int | None = None
    rx_bytes: int | None = None
    tx_bytes: int | None = None
    virtual: bool = False

    @property
    def up(self) -> bool:
        # Loopback reports `unknown`; so do some tunnel and virtual drivers that are nevertheless usable.
        return self.operstate in ("up", "unknown")


def read_netdev(if_dir: Path) -> NetDev:
    stats = if_dir / "statistics"
    return NetDev(if_dir.name, read_sysfs(if_dir / "operstate") or "", read_int(if_dir / "mtu"),
                  read_int(if_dir / "device" / "numa_node"), read_int(stats / "rx_bytes"), read_int(stats / "tx_bytes"),
                  virtual=not (if_dir / "device").exists())


def read_netdevs(sysfs_root: Path = Path("/sys")) -> list[NetDev]:
    return [read_netdev(d) for d in entries(Path(sysfs_root) / "class" / "net")]


def parse_ipv4_interfaces(text: str) -> dict[str, str]:
    """`ip -o -4 addr show` -> {address: interface}; a veth's peer suffix (`veth0@if5`) is dropped."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[2] == "inet":
            out.setdefault(fields[3].split("/")[0], fields[1].split("@")[0])
    return out


IPV4_INTERFACES = CommandFact("ipv4_interfaces", ("ip", "-o", "-4", "addr", "show"), parse_ipv4_interfaces)
