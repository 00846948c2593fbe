"""RDMA tool facts: `ibv_devinfo [-v]` and `ibv_devices` (rdma-core, Debian package `ibverbs-utils`), and
`rdma link show` (iproute2), text or JSON (`rdma -j link show`).

`ibv_devinfo` prints `key:<tabs>value` lines: device fields at one tab, `port:` at two, port fields at three;
enumerations print as `NAME (n)`. A host without RDMA prints one error line instead (`No IB devices found`, or
`Failed to get IB devices list: Function not implemented` without RDMA netlink); that line lands in `error`.

`rdma link` text lines are `link <dev>/<port> [subnet_prefix .. lid .. sm_lid .. lmc ..] state S physical_state P
[netdev N]`; every key is optional. Without RDMA netlink support it prints `Failed to open NETLINK_RDMA socket`;
that goes to `error`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from p2p_ops import files
from p2p_ops.errors import BadInput
from p2p_ops.facts.base import CommandFact
from p2p_ops.facts.ib_model import Gid, IbDevice, IbPort

_ENUM = re.compile(r"^(?P<name>.*?)\s*\((?P<code>-?\d+)\)$")
_GID = re.compile(r"^GID\[\s*(?P<idx>\d+)\]:\s*(?P<gid>[0-9a-fA-F:.]+)(?:,\s*(?P<type>.+))?$")
_ERROR_HINTS = ("Failed to", "No IB devices found", "wasn't found", "Invalid port")


@dataclass
class IbvDevinfo:
    devices: list[IbDevice] = field(default_factory=list)
    error: str | None = None


def split_enum(value: str) -> tuple[str, int | None]:
    """`PORT_ACTIVE (4)` -> (`PORT_ACTIVE`, 4); values without a code come back unchanged."""
    return (m["name"], int(m["code"])) if (m := _ENUM.match(value.strip())) else (value.strip(), None)


def _port_field(port: IbPort, key: str, value: str) -> None:
    port.fields[key] = value
    if key == "state":
        state, port.state_code = split_enum(value)
        port.state = state.removeprefix("PORT_")  # the kernel's name, as sysfs shows it
    elif key == "phys_state":
        port.phys_state = split_enum(value)[0]
    elif key == "port_lid":
        port.lid = value
    elif key in ("link_layer", "active_mtu", "max_mtu", "sm_lid", "active_width", "active_speed"):
        setattr(port, key, value)


def parse_ibv_devinfo(text: str) -> IbvDevinfo:
    info = IbvDevinfo()
    device: IbDevice | None = None
    port: IbPort | None = None
    for line in (raw.strip() for raw in text.splitlines()):
        key, sep, value = (part.strip() for part in line.partition(":"))
        if line.startswith("hca_id:"):
            device, port = IbDevice(name=value), None
            info.devices.append(device)
        elif device is None:
            if any(hint in line for hint in _ERROR_HINTS):
                info.error = line
        elif port is not None and (gid := _GID.match(line)):  # old and new GID line forms
            port.gids.append(Gid(int(gid["idx"]), gid["gid"], (gid["type"] or "").strip()))
        elif not sep:
            continue
        elif key == "port" and value.isdecimal():
            port = IbPort(port=int(value))
            device.ports.append(port)
        elif port is not None:
            # Device fields all come before the first `port:` line, so everything after it is a port field;
            # that also accepts copies whose tabs became spaces.
            _port_field(port, key, value)
        elif key == "transport":
            device.transport = split_enum(value)[0]
        elif key != "Device ports":
            device.fields[key] = value
    return info


@dataclass
class IbvDevices:
    """`ibv_devices`: device name -> node GUID (16 hex digits, no colons)."""

    devices: dict[str, str] = field(default_factory=dict)
    error: str | None = None


def parse_ibv_devices(text: str) -> IbvDevices:
    out = IbvDevices()
    for line in text.splitlines():
        parts = line.split()
        if not parts or parts[0] in ("device", "------"):
            continue
        if any(hint in line for hint in _ERROR_HINTS):
            out.error = line.strip()
        elif len(parts) == 2 and re.fullmatch(r"[0-9a-fA-F]{16}", parts[1]):
            out.devices[parts[0]] = parts[1]
    return out


IBV_DEVINFO = CommandFact("ibv_devinfo", ("ibv_devinfo", "-v"), parse_ibv_devinfo)
IBV_DEVICES = CommandFact("ibv_devices", ("ibv_devices",), parse_ibv_devices)


@dataclass
class RdmaLink:
    device: str
    port: int
    state: str = ""
    physical_state: str = ""
    netdev: str = ""
    attrs: dict[str, str] = field(default_factory=dict)


@dataclass
class RdmaLinks:
    links: list[RdmaLink] = field(default_factory=list)
    error: str | None = None


def _link(device: str, port: int, attrs: dict[str, str]) -> RdmaLink:
    return RdmaLink(device, port, attrs.get("state", ""), attrs.get("physical_state", ""), attrs.get("netdev", ""),
                    attrs)


def parse_rdma_link(text: str) -> RdmaLinks:
    stripped = text.strip()
    if stripped.startswith("["):
        try:
            return RdmaLinks([_link(str(item.get("ifname", "")), int(item.get("port", 0)),
                                    {k: str(v) for k, v in item.items()})
                              for item in files.parse_json(stripped, "rdma link -j")])
        except (BadInput, TypeError):
            pass
    out = RdmaLinks()
    for line in (raw.strip() for raw in stripped.splitlines()):
        words = line.split()
        if len(words) >= 2 and words[0] == "link" and "/" in words[1]:
            device, _, port = words[1].rpartition("/")
            # The rest is key/value pairs; a trailing key without a value (seen after `netdev`) is ignored.
            attrs = dict(zip(words[2::2], words[3::2], strict=False))
            out.links.append(_link(device, int(port) if port.isdecimal() else 0, attrs))
        elif line.startswith(("Failed", "Error", "error")):
            out.error = line
    return out


RDMA_LINK = CommandFact("rdma_link", ("rdma", "link", "show"), parse_rdma_link)
