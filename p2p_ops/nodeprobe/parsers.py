"""Pure parsers for the node probe: one per section of the probe script's output, tested from captured text.

Each takes the text a section printed (stdout and stderr together) and returns a small typed value; none
touches the host. Shapes:

    parse_sections("@@p2p-probe gpus\\n...\\n@@p2p-rc 0\\n...") -> {"gpus": Section(rc=0, text="...")}
    parse_gpus("0, NVIDIA H100 80GB HBM3, 81559, 3, 550.54.15, 00000000:18:00.0")
        -> [Gpu(index=0, name="NVIDIA H100 80GB HBM3", memory_total_mib=81559, memory_used_mib=3, ...)]
    parse_rdma("/sys/class/infiniband/mlx5_0/device/numa_node:1\\n.../ports/1/state:4: ACTIVE")
        -> [RdmaDevice(name="mlx5_0", numa_node=1, ports={1: RdmaPort(state="ACTIVE", ...)}, netdevs=[])]
    parse_python('{"python": "3.11.7", "executable": "...", "packages": {"lmcache": "0.5.6", ...}}')
        -> PythonEnv(version="3.11.7", executable="...", packages={...})
    parse_listeners("LISTEN 0 128 127.0.0.1:8081 0.0.0.0:* users:((\\"lmcache\\",pid=12,fd=5))")
        -> [Listener(address="127.0.0.1", port=8081, process="lmcache", pid=12)]
    parse_df("Filesystem 1024-blocks Used Available Capacity Mounted on\\n/dev/vda 100 60 40 60% /")
        -> Disk(mount="/", total_bytes=102400, avail_bytes=40960)
    parse_memlock("8192 unlimited") -> Memlock(soft=8388608, hard=None)   (None = unlimited)
    parse_model_cache("present /root/.cache/huggingface/hub/models--Qwen--Qwen3-8B\\nabc123")
        -> ModelCache(present=True, path="...", snapshots=["abc123"])
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Optional

SECTION = "@@p2p-probe"
RC = "@@p2p-rc"
ABSENT = "@@absent"


@dataclass(frozen=True)
class Section:
    rc: int
    text: str


def parse_sections(output: str) -> dict[str, Section]:
    """Split the probe script's output into its named sections (a section cut short gets rc -1)."""
    sections: dict[str, Section] = {}
    name: Optional[str] = None
    lines: list[str] = []
    for line in output.splitlines():
        if line.startswith(SECTION + " "):
            if name is not None:
                sections[name] = Section(-1, "\n".join(lines).strip("\n"))
            name, lines = line[len(SECTION) + 1:].strip(), []
        elif line.startswith(RC + " ") and name is not None:
            rc = line[len(RC) + 1:].strip()
            sections[name] = Section(int(rc) if rc.lstrip("-").isdigit() else -1, "\n".join(lines).strip("\n"))
            name, lines = None, []
        elif name is not None:
            lines.append(line)
    if name is not None:
        sections[name] = Section(-1, "\n".join(lines).strip("\n"))
    return sections


# ---- GPUs ---------------------------------------------------------------------------------------------

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
    return int(value) if value.isdigit() else None


def parse_gpus(text: str) -> Optional[list[Gpu]]:
    """`nvidia-smi --query-gpu=index,name,memory.total,memory.used,driver_version,pci.bus_id
    --format=csv,noheader,nounits`; None when nvidia-smi is absent (the script prints @@absent)."""
    if text.strip() == ABSENT:
        return None
    gpus = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 2 or not parts[0].isdigit():
            continue  # "No devices were found", driver errors: no GPU rows
        parts += [""] * (6 - len(parts))
        gpus.append(Gpu(int(parts[0]), parts[1], _int_or_none(parts[2]), _int_or_none(parts[3]), parts[4],
                        parts[5]))
    return gpus


# ---- RDMA ---------------------------------------------------------------------------------------------

@dataclass
class RdmaPort:
    state: str = ""
    link_layer: str = ""
    rate: str = ""


@dataclass
class RdmaDevice:
    name: str
    numa_node: Optional[int] = None
    ports: dict[int, RdmaPort] = field(default_factory=dict)
    netdevs: list[str] = field(default_factory=list)


_SYSFS_LINE = re.compile(r"^/sys/class/infiniband/([^/]+)/(.+?):(.*)$")
_NETDEV_LINE = re.compile(r"^/sys/class/infiniband/([^/]+)/device/net/([^/\s]+)$")


def parse_rdma(text: str) -> list[RdmaDevice]:
    """`grep -H "" /sys/class/infiniband/*/device/numa_node .../ports/*/{state,link_layer,rate}` plus
    `ls -d /sys/class/infiniband/*/device/net/*`; sysfs values keep their numeric prefix (`4: ACTIVE`)."""
    devices: dict[str, RdmaDevice] = {}
    for line in text.splitlines():
        line = line.strip()
        m = _NETDEV_LINE.match(line)
        if m:
            devices.setdefault(m[1], RdmaDevice(m[1])).netdevs.append(m[2])
            continue
        m = _SYSFS_LINE.match(line)
        if not m:
            continue
        dev = devices.setdefault(m[1], RdmaDevice(m[1]))
        attr, value = m[2], m[3].strip()
        if attr == "device/numa_node":
            dev.numa_node = int(value) if value.lstrip("-").isdigit() else None
            continue
        pm = re.fullmatch(r"ports/(\d+)/(state|link_layer|rate)", attr)
        if pm:
            port = dev.ports.setdefault(int(pm[1]), RdmaPort())
            # `4: ACTIVE` -> ACTIVE; rate and link_layer have no prefix.
            value = value.split(":", 1)[1].strip() if pm[2] == "state" and ":" in value else value
            setattr(port, pm[2], value)
    return [devices[k] for k in sorted(devices)]


# ---- Python and packages ------------------------------------------------------------------------------

@dataclass
class PythonEnv:
    executable: str
    version: Optional[str] = None
    packages: dict[str, Optional[str]] = field(default_factory=dict)
    error: Optional[str] = None

    @property
    def present(self) -> bool:
        return self.error is None


def parse_python(text: str, executable: str = "") -> PythonEnv:
    """The probe's JSON line, or `missing <path>` when the node's interpreter does not exist."""
    text = text.strip()
    if text.startswith("missing "):
        return PythonEnv(text[len("missing "):], error=f"no python at {text[len('missing '):]}")
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            try:
                data = json.loads(line)
            except ValueError:
                break
            return PythonEnv(data.get("executable", executable), data.get("python"), data.get("packages") or {})
    return PythonEnv(executable, error=f"python did not report its versions: {text[-200:] or '(no output)'}")


# ---- listening ports ----------------------------------------------------------------------------------

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


def _split_hostport(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    host = host.split("%", 1)[0]  # 127.0.0.1%lo
    return host, int(port)


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
    """`ss -Htlnp` (process names only for what this user may see) or, without ss, /proc/net/tcp{,6}."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 5 and parts[0] == "LISTEN":
            try:
                host, port = _split_hostport(parts[3])
            except ValueError:
                continue
            m = _SS_USERS.search(line)
            out.append(Listener(host, port, m[1] if m else "", int(m[2]) if m else None))
        elif len(parts) >= 4 and parts[0].endswith(":") and parts[3] == "0A":  # /proc/net/tcp LISTEN
            hexaddr, _, hexport = parts[1].partition(":")
            out.append(Listener(_hex_addr(hexaddr), int(hexport, 16)))
    return out


# ---- disk, memlock, model cache -----------------------------------------------------------------------

@dataclass(frozen=True)
class Disk:
    mount: str
    total_bytes: int
    avail_bytes: int


def parse_df(text: str) -> Optional[Disk]:
    """`df -Pk PATH`: the POSIX format, sizes in KiB, one data line (long device names do not wrap)."""
    for line in text.splitlines()[1:]:
        parts = line.split()
        if len(parts) >= 6 and parts[1].isdigit() and parts[3].isdigit():
            return Disk(" ".join(parts[5:]), int(parts[1]) * 1024, int(parts[3]) * 1024)
    return None


@dataclass(frozen=True)
class Memlock:
    soft: Optional[int]     # bytes; None = unlimited
    hard: Optional[int]
    error: Optional[str] = None

    @property
    def unlimited(self) -> bool:
        return self.error is None and self.soft is None


def parse_memlock(text: str) -> Memlock:
    """`echo "$(ulimit -Sl) $(ulimit -Hl)"`: each `unlimited` or KiB."""
    parts = text.split()
    if len(parts) != 2 or not all(p == "unlimited" or p.isdigit() for p in parts):
        return Memlock(None, None, f"unexpected ulimit output {text.strip()!r}")
    soft, hard = (None if p == "unlimited" else int(p) * 1024 for p in parts)
    return Memlock(soft, hard)


@dataclass(frozen=True)
class ModelCache:
    present: bool
    path: str
    snapshots: tuple[str, ...] = ()


def parse_model_cache(text: str) -> Optional[ModelCache]:
    """`present PATH` + snapshot names, or `absent PATH`; None when not checked (embedded runtime)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines or lines[0] == ABSENT:
        return None
    word, _, path = lines[0].partition(" ")
    return ModelCache(word == "present", path, tuple(lines[1:]) if word == "present" else ())


def parse_host(text: str) -> dict[str, str]:
    lines = [ln.strip() for ln in text.splitlines()]
    return {"hostname": lines[0] if lines else "", "kernel": lines[1] if len(lines) > 1 else ""}
