"""`rdma link show` (iproute2), text or JSON (`rdma -j link show`).

Text lines are `link <dev>/<port> [subnet_prefix .. lid .. sm_lid .. lmc ..] state S physical_state P [netdev N]`;
every key is optional. Without RDMA netlink support the tool prints `Failed to open NETLINK_RDMA socket`; that
goes to `error`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from p2p_ops import files
from p2p_ops.errors import BadInput
from p2p_ops.facts.base import CommandFact


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


def _from_line(line: str) -> RdmaLink | None:
    words = line.split()
    if len(words) < 2 or words[0] != "link" or "/" not in words[1]:
        return None
    device, _, port = words[1].rpartition("/")
    # The rest is key/value pairs; a trailing key without a value (seen after `netdev`) is ignored.
    return _link(device, int(port) if port.isdecimal() else 0, dict(zip(words[2::2], words[3::2], strict=False)))


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
    for line in stripped.splitlines():
        if link := _from_line(line.strip()):
            out.links.append(link)
        elif line.strip().startswith(("Failed", "Error", "error")):
            out.error = line.strip()
    return out


RDMA_LINK = CommandFact("rdma_link", ("rdma", "link", "show"), parse_rdma_link)
