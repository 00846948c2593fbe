"""RDMA devices as the kernel shows them under `/sys/class/infiniband` (ABI: sysfs-class-infiniband).

Values carry a numeric prefix (`state` = `4: ACTIVE`, `phys_state` = `5: LinkUp`); GIDs are always eight groups
(`0000:...:ffff:0a7d:016b` is `::ffff:10.125.1.107`); `counters/port_xmit_data` counts octets divided by 4.
`read_ib_devices(sysfs_root)` takes the directory standing in for `/sys`, so tests read fixture trees::

    [IbDevice(name="mlx5_0", numa_node=0, node_guid="...", ports=[IbPort(port=1, state="ACTIVE",
              phys_state="LinkUp", link_layer="InfiniBand", rate="400 Gb/sec (4X NDR)", lid="0x4",
              sm_lid="0x1", gids=[Gid(index=0, gid="fe80:...", type="", ndev="")], counters={...})])]
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from pathlib import Path

from p2p_ops.facts.base import read_int, read_sysfs
from p2p_ops.facts.ibverbs import Gid

# Counters worth a snapshot: the data counters for rail accounting plus the error counters that explain them.
PORT_COUNTERS = (
    "port_xmit_data", "port_rcv_data", "port_xmit_packets", "port_rcv_packets", "symbol_error",
    "link_downed", "link_error_recovery", "port_rcv_errors", "port_xmit_discards", "port_xmit_wait",
)
_ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"


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
    gids: list[Gid] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)

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
    netdevs: list[str] = field(default_factory=list)
    ports: list[IbPort] = field(default_factory=list)


def split_prefixed(value: str | None) -> tuple[int | None, str]:
    """`4: ACTIVE` -> (4, `ACTIVE`); a value without a numeric prefix comes back as (None, value)."""
    if value is None:
        return None, ""
    code, sep, name = value.partition(":")
    if sep and code.strip().lstrip("-").isdigit():
        return int(code), name.strip()
    return None, value.strip()


def gid_ipv4(gid: str) -> str | None:
    """The IPv4 address inside an IPv4-mapped GID (8-group or `::ffff:a.b.c.d` form), else None."""
    try:
        addr = ipaddress.IPv6Address(gid)
    except ValueError:
        return None
    mapped = addr.ipv4_mapped
    return str(mapped) if mapped else None


def _read_gids(port_dir: Path) -> list[Gid]:
    gids = []
    gid_dir = port_dir / "gids"
    if not gid_dir.is_dir():
        return gids
    for entry in sorted(gid_dir.iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else 1 << 30):
        value = read_sysfs(entry)
        if not entry.name.isdigit() or not value or value == _ZERO_GID:
            continue
        idx = entry.name
        gids.append(Gid(
            index=int(idx),
            gid=value,
            type=read_sysfs(port_dir / "gid_attrs" / "types" / idx) or "",
            ndev=read_sysfs(port_dir / "gid_attrs" / "ndevs" / idx) or "",
        ))
    return gids


def read_ib_port(port_dir: Path) -> IbPort:
    code, state = split_prefixed(read_sysfs(port_dir / "state"))
    port = IbPort(
        port=int(port_dir.name),
        state=state,
        state_code=code,
        phys_state=split_prefixed(read_sysfs(port_dir / "phys_state"))[1],
        link_layer=read_sysfs(port_dir / "link_layer") or "",
        rate=read_sysfs(port_dir / "rate") or "",
        lid=read_sysfs(port_dir / "lid") or "",
        sm_lid=read_sysfs(port_dir / "sm_lid") or "",
        gids=_read_gids(port_dir),
    )
    for name in PORT_COUNTERS:
        value = read_int(port_dir / "counters" / name)
        if value is not None:
            port.counters[name] = value
    return port


def read_ib_device(dev_dir: Path) -> IbDevice:
    device = IbDevice(
        name=dev_dir.name,
        numa_node=read_int(dev_dir / "device" / "numa_node"),
        node_guid=read_sysfs(dev_dir / "node_guid") or "",
        fw_ver=read_sysfs(dev_dir / "fw_ver") or "",
    )
    if (dev_dir / "device").is_symlink():
        device.pci_path = str((dev_dir / "device").resolve())
    net_dir = dev_dir / "device" / "net"
    if net_dir.is_dir():
        device.netdevs = sorted(p.name for p in net_dir.iterdir())
    ports_dir = dev_dir / "ports"
    if ports_dir.is_dir():
        port_dirs = sorted((p for p in ports_dir.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
        device.ports = [read_ib_port(p) for p in port_dirs]
    return device


def read_ib_devices(sysfs_root: Path = Path("/sys")) -> list[IbDevice]:
    """Every device under `<sysfs_root>/class/infiniband`; an absent class directory means no RDMA stack."""
    class_dir = Path(sysfs_root) / "class" / "infiniband"
    if not class_dir.is_dir():
        return []
    return [read_ib_device(d) for d in sorted(class_dir.iterdir()) if d.is_dir()]


def read_uverbs(sysfs_root: Path = Path("/sys")) -> dict[str, str]:
    """uverbs character device -> ibdev, from `/sys/class/infiniband_verbs/uverbsN/ibdev`."""
    class_dir = Path(sysfs_root) / "class" / "infiniband_verbs"
    if not class_dir.is_dir():
        return {}
    out = {}
    for entry in sorted(class_dir.iterdir()):
        ibdev = read_sysfs(entry / "ibdev")
        if entry.name.startswith("uverbs") and ibdev:
            out[entry.name] = ibdev
    return out


def list_dev_infiniband(dev_root: Path = Path("/dev")) -> list[str]:
    """Names under `/dev/infiniband` (uverbsN, rdma_cm, umadN); empty when it is not mapped in."""
    directory = Path(dev_root) / "infiniband"
    return sorted(p.name for p in directory.iterdir()) if directory.is_dir() else []
