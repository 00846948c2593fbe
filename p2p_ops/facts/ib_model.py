"""One model of an RDMA device and its ports, whoever read it: sysfs (`sysfs_ib`), `ibv_devinfo` (`ibverbs`) or
the node probe's batched sysfs read. Each reader fills what its source shows and leaves the rest empty.

Port `state` uses the kernel's names (`ACTIVE`, `DOWN`, `INIT`, `ARMED`); `ibv_devinfo`'s `PORT_ACTIVE` is
stored as `ACTIVE`, so `IbPort.active` means the same whatever the source.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field


@dataclass
class Gid:
    # `type` like `RoCE v2` (only printed for Ethernet ports).
    index: int
    gid: str
    type: str = ""
    ndev: str = ""


@dataclass
class IbPort:
    port: int
    state: str = ""
    state_code: int | None = None
    phys_state: str = ""
    link_layer: str = ""
    rate: str = ""
    lid: str = ""
    sm_lid: str = ""
    active_mtu: str = ""
    max_mtu: str = ""
    active_width: str = ""
    active_speed: str = ""
    gids: list[Gid] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)
    fields: dict[str, str] = field(default_factory=dict)   # every `key: value` ibv_devinfo printed, as printed

    @property
    def active(self) -> bool:
        return self.state == "ACTIVE"

    def roce_v2_ipv4_gids(self) -> list[Gid]:
        """GIDs usable for routable RoCE: type `RoCE v2` *and* an IPv4-mapped address (fe80:: is RoCE v2 too)."""
        return [g for g in self.gids if "v2" in g.type and gid_ipv4(g.gid)]


@dataclass
class IbDevice:
    name: str
    numa_node: int | None = None
    node_guid: str = ""
    fw_ver: str = ""
    pci_path: str = ""
    transport: str = ""
    netdevs: list[str] = field(default_factory=list)
    ports: list[IbPort] = field(default_factory=list)
    fields: dict[str, str] = field(default_factory=dict)   # ibv_devinfo's device fields, as printed

    def port(self, number: int) -> IbPort:
        # Added when not seen yet: readers fill ports line by line.
        found = next((p for p in self.ports if p.port == number), None)
        if found is None:
            found = IbPort(number)
            self.ports.append(found)
            self.ports.sort(key=lambda p: p.port)
        return found


def split_prefixed(value: str | None) -> tuple[int | None, str]:
    """`4: ACTIVE` -> (4, `ACTIVE`); without a numeric prefix: (None, value)."""
    if value is None:
        return None, ""
    code, sep, name = value.partition(":")
    if sep and code.strip().lstrip("-").isdecimal():
        return int(code), name.strip()
    return None, value.strip()


def gid_ipv4(gid: str) -> str | None:
    """The IPv4 address inside an IPv4-mapped GID (8-group or `::ffff:a.b.c.d` form), else None."""
    try:
        mapped = ipaddress.IPv6Address(gid).ipv4_mapped
    except ValueError:
        return None
    return str(mapped) if mapped else None
