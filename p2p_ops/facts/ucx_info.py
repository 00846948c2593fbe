"""`ucx_info -v` (version and build flags) and `ucx_info -d` (memory domains, transports, devices); `ucx_info -e`
output is a log plus tables, which `p2p_ops.facts.ucx_trace` parses.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from p2p_ops.facts.base import CommandFact

_VERSION = re.compile(r"^#\s*(?:Library )?[Vv]ersion:?\s+(\d+\.\d+\.\d+)")
_KEYVAL = re.compile(r"^#\s*([A-Za-z][A-Za-z ]*?):\s*(.*)$")
_FAILED = re.compile(r"^#\s*<\s*failed to open (.+?)\s*>")
_DOMAIN_KEYS = {"Component": "component", "memory types": "memory_types"}
_TRANSPORT_KEYS = {"Device": "device", "Type": "type", "System device": "sysdev"}
# Transports that move the payload with RDMA verbs; anything else on a network device is TCP-class.
RDMA_TRANSPORTS = ("rc_mlx5", "rc_verbs", "dc_mlx5", "ud_mlx5", "ud_verbs", "srd", "rc", "dc", "ud", "ib")


@dataclass
class UcxVersion:
    version: str = ""
    configured_with: list[str] = field(default_factory=list)
    error: str | None = None


def parse_ucx_version(text: str) -> UcxVersion:
    out = UcxVersion()
    for line in text.splitlines():
        if m := _VERSION.match(line):
            out.version = m[1]
        elif line.startswith("# Configured with:"):
            out.configured_with = line.split(":", 1)[1].split()
    if not out.version:
        out.error = text.strip().splitlines()[0] if text.strip() else "no version in output"
    return out


@dataclass
class UcxTransport:
    transport: str
    device: str = ""
    type: str = ""
    sysdev: str = ""

    @property
    def label(self) -> str:
        return f"{self.transport}/{self.device}"


@dataclass
class UcxMemoryDomain:
    name: str
    component: str = ""
    memory_types: str = ""
    transports: list[UcxTransport] = field(default_factory=list)


@dataclass
class UcxDevices:
    memory_domains: list[UcxMemoryDomain] = field(default_factory=list)
    connection_managers: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def transports(self) -> list[UcxTransport]:
        return [t for md in self.memory_domains for t in md.transports]

    def has_dmabuf(self) -> bool:
        # A CUDA memory type registered through DMA-BUF: GPUDirect without nvidia_peermem.
        return any("dmabuf" in md.memory_types and "cuda" in md.memory_types for md in self.memory_domains)


def parse_ucx_devices(text: str) -> UcxDevices:
    out = UcxDevices()
    md: UcxMemoryDomain | None = None
    tl: UcxTransport | None = None
    for line in text.splitlines():
        key, value = (m[1].strip(), m[2].strip()) if (m := _KEYVAL.match(line)) else ("", "")
        if failed := _FAILED.match(line):
            out.failed.append(failed[1])
        elif key == "Memory domain":
            md, tl = UcxMemoryDomain(value), None
            out.memory_domains.append(md)
        elif key == "Connection manager":
            out.connection_managers.append(value)
            md = tl = None
        elif md is None:
            continue
        elif key in _DOMAIN_KEYS:
            setattr(md, _DOMAIN_KEYS[key], value)
        elif key == "Transport":
            tl = UcxTransport(value)
            md.transports.append(tl)
        elif tl is not None and key in _TRANSPORT_KEYS:
            setattr(tl, _TRANSPORT_KEYS[key], value)
    if not out.memory_domains:
        out.error = text.strip().splitlines()[0] if text.strip() else "no memory domains in output"
    return out


UCX_INFO_VERSION = CommandFact("ucx_info_v", ("ucx_info", "-v"), parse_ucx_version)
UCX_INFO_DEVICES = CommandFact("ucx_info_d", ("ucx_info", "-d"), parse_ucx_devices)
