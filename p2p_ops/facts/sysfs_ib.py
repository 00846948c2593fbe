"""RDMA devices as the kernel shows them under `/sys/class/infiniband` (ABI: sysfs-class-infiniband).

Values carry a numeric prefix (`state` = `4: ACTIVE`, `phys_state` = `5: LinkUp`); GIDs are always eight groups
(`0000:...:ffff:0a7d:016b` is `::ffff:10.125.1.107`); `counters/port_xmit_data` counts octets divided by 4.
"""

from __future__ import annotations

import re
from pathlib import Path

from p2p_ops.facts.base import CommandFact, entries, read_int, read_sysfs
from p2p_ops.facts.ib_model import Gid, IbDevice, IbPort, split_prefixed

# Counters worth a snapshot: the data counters for rail accounting plus the error counters that explain them.
PORT_COUNTERS = ("port_xmit_data", "port_rcv_data", "port_xmit_packets", "port_rcv_packets", "symbol_error",
                 "link_downed", "link_error_recovery", "port_rcv_errors", "port_xmit_discards", "port_xmit_wait")
_ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"


def _numbered(directory: Path) -> list[Path]:
    return sorted((p for p in entries(directory) if p.name.isdecimal()), key=lambda p: int(p.name))


def _read_gids(port_dir: Path) -> list[Gid]:
    attrs = port_dir / "gid_attrs"
    return [Gid(int(e.name), value, read_sysfs(attrs / "types" / e.name) or "",
                read_sysfs(attrs / "ndevs" / e.name) or "")
            for e in _numbered(port_dir / "gids") if (value := read_sysfs(e)) and value != _ZERO_GID]


def read_ib_port(port_dir: Path) -> IbPort:
    code, state = split_prefixed(read_sysfs(port_dir / "state"))
    link_layer, rate, lid, sm_lid = (read_sysfs(port_dir / n) or "" for n in ("link_layer", "rate", "lid", "sm_lid"))
    counters = {name: value for name in PORT_COUNTERS if (value := read_int(port_dir / "counters" / name)) is not None}
    return IbPort(int(port_dir.name), state, code, split_prefixed(read_sysfs(port_dir / "phys_state"))[1],
                  link_layer, rate, lid, sm_lid, gids=_read_gids(port_dir), counters=counters)


def read_ib_device(dev_dir: Path) -> IbDevice:
    pci = dev_dir / "device"
    return IbDevice(dev_dir.name, read_int(pci / "numa_node"), read_sysfs(dev_dir / "node_guid") or "",
                    read_sysfs(dev_dir / "fw_ver") or "", str(pci.resolve()) if pci.is_symlink() else "",
                    netdevs=[p.name for p in entries(pci / "net")],
                    ports=[read_ib_port(p) for p in _numbered(dev_dir / "ports")])


def read_ib_devices(sysfs_root: Path = Path("/sys")) -> list[IbDevice]:
    return [read_ib_device(d) for d in entries(Path(sysfs_root) / "class" / "infiniband") if d.is_dir()]


def read_uverbs(sysfs_root: Path = Path("/sys")) -> dict[str, str]:
    """uverbs character device -> ibdev, from `/sys/class/infiniband_verbs/uverbsN/ibdev`."""
    ibdevs = {e.name: read_sysfs(e / "ibdev") for e in entries(Path(sysfs_root) / "class" / "infiniband_verbs")}
    return {name: ibdev for name, ibdev in ibdevs.items() if name.startswith("uverbs") and ibdev}


def list_dev_infiniband(dev_root: Path = Path("/dev")) -> list[str]:
    """Names under `/dev/infiniband` (uverbsN, rdma_cm, umadN); empty when it is not mapped in."""
    return [p.name for p in entries(Path(dev_root) / "infiniband")]


# The same sysfs attributes read in one command, for the batched node read (`p2pctl probe`, `doctor`): a remote
# node's /sys cannot be walked with Path. `grep -H ""` prints `<path>:<value>` per attribute.
SYSFS_IB_GREP = ('grep -H "" /sys/class/infiniband/*/device/numa_node /sys/class/infiniband/*/ports/*/state '
                 '/sys/class/infiniband/*/ports/*/link_layer /sys/class/infiniband/*/ports/*/rate 2>/dev/null; '
                 'ls -d /sys/class/infiniband/*/device/net/* 2>/dev/null; true')
_GREP_LINE = re.compile(r"^/sys/class/infiniband/([^/]+)/(.+?):(.*)$")
_NETDEV_LINE = re.compile(r"^/sys/class/infiniband/([^/]+)/device/net/([^/\s]+)$")


def parse_sysfs_ib_grep(text: str) -> list[IbDevice]:
    devices: dict[str, IbDevice] = {}
    for line in text.splitlines():
        if m := _NETDEV_LINE.match(line.strip()):
            devices.setdefault(m[1], IbDevice(m[1])).netdevs.append(m[2])
        elif m := _GREP_LINE.match(line.strip()):
            dev, attr, value = devices.setdefault(m[1], IbDevice(m[1])), m[2], m[3].strip()
            if attr == "device/numa_node":
                dev.numa_node = int(value) if value.lstrip("-").isdecimal() else None
            elif pm := re.fullmatch(r"ports/(\d+)/(state|link_layer|rate)", attr):
                port = dev.port(int(pm[1]))
                if pm[2] == "state":
                    port.state_code, port.state = split_prefixed(value)
                else:
                    setattr(port, pm[2], value)
    return [devices[k] for k in sorted(devices)]


SYSFS_IB = CommandFact("sysfs_ib", ("sh", "-c", SYSFS_IB_GREP), parse_sysfs_ib_grep)
