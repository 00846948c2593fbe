"""Locked-memory limit (RDMA registration needs it unlimited) and loaded kernel modules (GPUDirect).

- `ulimit -l` prints `unlimited` or a number of KiB; the probe prints the soft and the hard limit
  (`ulimit -Sl`, `ulimit -Hl`) on one line, e.g. `8192 unlimited`.
- `/proc/<pid>/limits` has `Max locked memory   <soft>   <hard>   bytes`. Check the *running server*, not the
  login shell: systemd services take `LimitMEMLOCK=` from their unit.
- `/proc/modules` (what `lsmod` reads) and `lsmod` output: first column is the module name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from p2p_ops.facts.base import CommandFact, read_sysfs

_LIMIT_LINE = re.compile(r"^Max locked memory\s+(\S+)\s+(\S+)\s+(\S+)")
PEERMEM_MODULES = ("nvidia_peermem", "nv_peer_mem")


@dataclass
class Memlock:
    """Bytes; None means unlimited. `error` says why nothing was read."""
    soft: int | None = None
    hard: int | None = None
    source: str = ""
    error: str | None = None

    @property
    def unlimited(self) -> bool:
        return self.error is None and self.soft is None


def _bytes(value: str, unit_bytes: int) -> int | None:
    return None if value == "unlimited" else int(value) * unit_bytes


def parse_ulimit_l(text: str) -> Memlock:
    """`<soft> [<hard>]`, each `unlimited` or KiB (one value: a recording of plain `ulimit -l`)."""
    line = text.strip().splitlines()[-1].strip() if text.strip() else ""
    parts = line.split()
    if len(parts) not in (1, 2) or not all(p == "unlimited" or p.isdecimal() for p in parts):
        return Memlock(source="ulimit -l", error=f"unexpected `ulimit -l` output: {line!r}")
    return Memlock(_bytes(parts[0], 1024), _bytes(parts[-1], 1024), "ulimit -l")


def parse_proc_limits(text: str, source: str = "/proc/self/limits") -> Memlock:
    for line in text.splitlines():
        if m := _LIMIT_LINE.match(line):
            return Memlock(_bytes(m[1], 1), _bytes(m[2], 1), source)
    return Memlock(source=source, error=f"no 'Max locked memory' line in {source}")


def read_memlock(proc_root: Path = Path("/proc"), pid: int | str = "self") -> Memlock:
    path = Path(proc_root) / str(pid) / "limits"
    if (text := read_sysfs(path)) is None:
        return Memlock(source=str(path), error=f"cannot read {path}")
    return parse_proc_limits(text, f"/proc/{pid}/limits")


def parse_modules(text: str) -> list[str]:
    """Module names from `lsmod` (skips its `Module Size Used by` header) or `/proc/modules`."""
    firsts = (line.split(maxsplit=1)[0] for line in text.splitlines() if line.strip())
    return sorted({name for name in firsts if name != "Module" and re.fullmatch(r"[\w-]+", name)})


def read_modules(proc_root: Path = Path("/proc")) -> list[str] | None:
    """None when `/proc/modules` is not readable (some containers)."""
    return None if (text := read_sysfs(Path(proc_root) / "modules")) is None else parse_modules(text)


def proc_limits_fact(pid: int) -> CommandFact[Memlock]:
    # A server started by systemd has its unit's limit, not the shell's.
    return CommandFact("proc_limits", ("cat", f"/proc/{int(pid)}/limits"),
                       partial(parse_proc_limits, source=f"/proc/{int(pid)}/limits"))


ULIMIT_L = CommandFact("ulimit_l", ("sh", "-c", 'echo "$(ulimit -Sl) $(ulimit -Hl)"'), parse_ulimit_l)
LSMOD = CommandFact("lsmod", ("lsmod",), parse_modules)
