"""Which machine answered: host name and kernel release (`hostname; uname -r`)."""

from __future__ import annotations

from p2p_ops.facts.base import CommandFact


def parse_host(text: str) -> dict[str, str]:
    lines = [ln.strip() for ln in text.splitlines()]
    return {"hostname": lines[0] if lines else "", "kernel": lines[1] if len(lines) > 1 else ""}


HOST = CommandFact("host", ("sh", "-c", "hostname; uname -r"), parse_host)
# What a bundle keeps of a node's host: free text, not parsed.
HOST_TXT = CommandFact("host_txt", ("sh", "-c", "uname -a; hostname; nproc; ulimit -l"), str)
