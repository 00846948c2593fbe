"""Who listens on which TCP port, and which session each process belongs to.

`ss -Htlnp` names the process (for what this user may see); without ss, `/proc/net/tcp{,6}` gives addresses only.
`ps -eo pid=,sid=` maps each pid to its session: a fleet process leads its own session (setsid), so a listener
opened by a child (UCX's) is still attributed to the fleet process.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from p2p_ops.facts.base import CommandFact


@dataclass(frozen=True)
class Listener:
    address: str
    port: int
    process: str = ""
    pid: Optional[int] = None

    @property
    def wildcard(self) -> bool:
        return self.address in ("0.0.0.0", "*", "::", "[::]", "[::ffff:0.0.0.0]")


_SS_USERS = re.compile(r'users:\(\("([^"]*)",pid=(\d+)')


def _hex_addr(hexaddr: str) -> str:
    """/proc/net/tcp little-endian hex address -> dotted (IPv4) or bracketed IPv6."""
    if len(hexaddr) == 8:
        return ".".join(str(int(hexaddr[i:i + 2], 16)) for i in (6, 4, 2, 0))
    words = [hexaddr[i:i + 8] for i in range(0, 32, 8)]
    raw = "".join(bytes.fromhex(w)[::-1].hex() for w in words)
    if raw == "0" * 32:
        return "::"
    if raw.startswith("0" * 20 + "ffff"):
        return _hex_addr(bytes.fromhex(raw[24:])[::-1].hex())
    return "[" + ":".join(raw[i:i + 4] for i in range(0, 32, 4)) + "]"


def parse_listeners(text: str) -> list[Listener]:
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 5 and parts[0] == "LISTEN":
            host, _, port = parts[3].rpartition(":")  # the host may be 127.0.0.1%lo
            try:
                port_number = int(port)
            except ValueError:
                continue
            m = _SS_USERS.search(line)
            out.append(Listener(host.split("%", 1)[0], port_number, m[1] if m else "", int(m[2]) if m else None))
        elif len(parts) >= 4 and parts[0].endswith(":") and parts[3] == "0A":  # /proc/net/tcp LISTEN
            hexaddr, _, hexport = parts[1].partition(":")
            out.append(Listener(_hex_addr(hexaddr), int(hexport, 16)))
    return out


def parse_sessions(text: str) -> dict[int, int]:
    """`ps -eo pid=,sid=` -> {pid: sid}."""
    rows = (line.split() for line in text.splitlines())
    return {int(p[0]): int(p[1]) for p in rows if len(p) == 2 and p[0].isdecimal() and p[1].isdecimal()}


LISTENERS = CommandFact("listeners", ("sh", "-c", "ss -Htlnp 2>/dev/null || cat /proc/net/tcp /proc/net/tcp6"),
                        parse_listeners)
SESSIONS = CommandFact("sessions", ("ps", "-eo", "pid=,sid="), parse_sessions)
