"""`nvidia-smi topo -m`: the GPU/NIC connection matrix and which NIC sits closest to each GPU.

The header row is tab-separated and starts with a tab; diagonal cells are ` X `; `NIC Legend:` maps `NIC0` to
`mlx5_0` (older drivers put device names straight into the header and print `SOC` for `SYS`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from p2p_ops.facts.base import CommandFact
from p2p_ops.facts.logs import strip_ansi

# Best first: a NIC behind the same PCIe switch as the GPU beats one across the CPU interconnect. SOC is the
# old name of SYS.
LINKS = ("PIX", "PXB", "PHB", "NODE", "SYS")
LINK_RANK = {**{link: rank for rank, link in enumerate(LINKS)}, "SOC": 4}
_TRAILING = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")


@dataclass
class Topology:
    columns: list[str] = field(default_factory=list)
    rows: dict[str, dict[str, str]] = field(default_factory=dict)
    nic_names: dict[str, str] = field(default_factory=dict)
    cpu_affinity: dict[str, str] = field(default_factory=dict)
    numa_affinity: dict[str, str] = field(default_factory=dict)
    error: str | None = None

    @property
    def gpus(self) -> list[str]:
        return [c for c in self.columns if c.startswith("GPU")]

    @property
    def nics(self) -> list[str]:
        return [c for c in self.columns if not c.startswith("GPU")]

    def nic_name(self, column: str) -> str:
        return self.nic_names.get(column, column)

    def nics_at(self, gpu: str, link: str) -> list[str]:
        row = self.rows.get(gpu, {})
        return [self.nic_name(nic) for nic in self.nics if LINK_RANK.get(row.get(nic, "")) == LINK_RANK[link]]

    def closest_nics(self, gpu: str) -> tuple[str, list[str]]:
        return next(((link, names) for link in LINKS if (names := self.nics_at(gpu, link))), ("", []))


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.split("\t")]


def parse_topo(text: str) -> Topology:
    topo = Topology()
    lines = strip_ansi(text).splitlines()
    header_at = next((i for i, line in enumerate(lines) if line.startswith("\t") and "GPU0" in line), None)
    if header_at is None:
        topo.error = next((line.strip() for line in lines if line.strip()), "no topology matrix in output")
        return topo
    header = [c for c in _cells(lines[header_at])[1:] if c]
    topo.columns = [c for c in header if c not in _TRAILING]
    for line in lines[header_at + 1:]:
        if not line.strip() or line.startswith("Legend"):
            break
        cells = _cells(line)
        name, values = cells[0], cells[1:]
        topo.rows[name] = {col: values[i] for i, col in enumerate(topo.columns) if i < len(values)}
        extra = values[len(topo.columns):]
        if name.startswith("GPU") and extra:
            topo.cpu_affinity[name] = extra[0]
            topo.numa_affinity[name] = extra[1] if len(extra) > 1 else ""
    topo.nic_names = {m[1]: m[2] for line in lines if (m := re.match(r"^\s*(NIC\d+):\s*(\S+)\s*$", line))}
    return topo


NVIDIA_SMI_TOPO = CommandFact("nvidia_smi_topo", ("nvidia-smi", "topo", "-m"), parse_topo)
