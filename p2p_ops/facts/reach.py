"""Can this node open a TCP connection to each of these (host, port)? Bash's /dev/tcp, all targets in parallel,
each bounded by `timeout`. Output lines `ok|fail <host> <port> <label>`, parsed into `Reach`.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from functools import partial

from p2p_ops.facts.base import CommandFact

CONNECT_TIMEOUT_S = 3
# Only names and addresses reach the shell; anything else is skipped rather than quoted into a /dev/tcp path.
_SAFE_HOST = re.compile(r"[A-Za-z0-9.:_-]+")


@dataclass
class Reach:
    source: str            # node name the connect ran on
    target: str            # e.g. "node-b-0 p2p"
    host: str
    port: int
    ok: bool


def parse_reach(text: str, source: str) -> list[Reach]:
    out = []
    for line in text.splitlines():
        parts = line.split(maxsplit=3)
        if len(parts) == 4 and parts[0] in ("ok", "fail") and parts[2].isdecimal():
            out.append(Reach(source, parts[3], parts[1], int(parts[2]), parts[0] == "ok"))
    return out


def reach_fact(source: str, targets: list[tuple[str, str, int]]) -> CommandFact[list[Reach]]:
    """targets: (label, host, port). `source` names the node the check runs on (for the findings)."""
    q = shlex.quote
    lines = [f"( if timeout {CONNECT_TIMEOUT_S} bash -c {q(f'</dev/tcp/{h}/{int(p)}')}; "
             f"then echo {q(f'ok {h} {int(p)} {lab}')}; else echo {q(f'fail {h} {int(p)} {lab}')}; fi ) &"
             for lab, h, p in targets if _SAFE_HOST.fullmatch(h)]
    return CommandFact("reach", ("bash", "-c", "\n".join(lines + ["wait"])), partial(parse_reach, source=source))
