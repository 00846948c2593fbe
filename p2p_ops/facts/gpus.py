"""GPUs as `nvidia-smi --query-gpu` lists them; None when nvidia-smi is absent (a CPU node)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from p2p_ops.facts.base import ABSENT, CommandFact

GPU_QUERY = ("nvidia-smi --query-gpu=index,name,memory.total,memory.used,driver_version,pci.bus_id "
             "--format=csv,noheader,nounits")


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    memory_total_mib: Optional[int] = None
    memory_used_mib: Optional[int] = None
    driver: str = ""
    pci_bus_id: str = ""


def _int_or_none(value: str) -> Optional[int]:
    value = value.strip()
    return int(value) if value.isdecimal() else None


def parse_gpus(text: str) -> Optional[list[Gpu]]:
    if text.strip() == ABSENT:
        return None
    gpus = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 2 or not parts[0].isdecimal():
            continue  # "No devices were found", driver errors: no GPU rows
        parts += [""] * (6 - len(parts))
        gpus.append(Gpu(int(parts[0]), parts[1], _int_or_none(parts[2]), _int_or_none(parts[3]), parts[4], parts[5]))
    return gpus


GPUS = CommandFact("gpus", ("sh", "-c", f"if command -v nvidia-smi >/dev/null 2>&1; then {GPU_QUERY}; "
                                        f"else echo {ABSENT}; fi"), parse_gpus)
