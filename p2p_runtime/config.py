"""Engine configuration: one frozen dataclass, its validation, and the CLI that fills it.

Flag names are the dataclass fields in kebab case (``--num-blocks`` <-> ``num_blocks``), so a
fleet spec or a test can build the same config from an argv list or from keyword arguments.
"""

from __future__ import annotations

import argparse
from dataclasses import Field, dataclass, field, fields
import json
import math
import os
from typing import Any

from p2p_runtime.profiles import PROFILE_NAMES, KVProfile
from p2p_runtime.profiles import resolve as resolve_profile
from p2p_runtime.tokenizer import FIRST_UNUSED_ID

DEFAULT_CHUNK_SIZE = 256


class ConfigError(ValueError):
    """An invalid engine setting; the message names the flag and the limit."""


# vLLM's --kv-events-config, here rather than in kv_events: the fleet spec checks it on a control host, which has
# neither zmq nor msgspec (the `engine` extra).
class KVEventsConfigError(ValueError):
    """A bad ``--kv-events-config``; the message names the key and the fix."""


@dataclass(frozen=True)
class KVEventsConfig:
    enable_kv_cache_events: bool = False
    publisher: str | None = None
    endpoint: str = "tcp://127.0.0.1:5557"
    replay_endpoint: str | None = None
    buffer_steps: int = 10_000
    hwm: int = 100_000
    max_queue_size: int = 100_000
    topic: str = ""

    def __post_init__(self) -> None:
        publisher = self.publisher or ("zmq" if self.enable_kv_cache_events else "null")
        object.__setattr__(self, "publisher", publisher)
        if publisher not in ("zmq", "null"):
            raise KVEventsConfigError(f"kv-events-config publisher must be zmq or null, got {publisher!r}")
        for name in ("buffer_steps", "hwm", "max_queue_size"):
            if int(getattr(self, name)) <= 0:
                raise KVEventsConfigError(f"kv-events-config {name} must be > 0")
        if self.active:
            check_bind_endpoint("endpoint", self.endpoint)
            if self.replay_endpoint:
                check_bind_endpoint("replay_endpoint", self.replay_endpoint)

    @property
    def active(self) -> bool:
        return self.enable_kv_cache_events and self.publisher == "zmq"

    @classmethod
    def from_json(cls, text: str) -> "KVEventsConfig":
        if not text:
            return cls()
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise KVEventsConfigError(f"--kv-events-config is not JSON: {exc}") from None
        if not isinstance(data, dict):
            raise KVEventsConfigError("--kv-events-config must be a JSON object")
        known = {f.name for f in fields(cls)}
        if unknown := sorted(set(data) - known):
            raise KVEventsConfigError(f"--kv-events-config has unknown keys {unknown}; known: {sorted(known)}")
        return cls(**data)


def check_bind_endpoint(key: str, endpoint: str) -> None:
    if not endpoint.startswith("tcp://") or ":" not in endpoint[6:]:
        raise KVEventsConfigError(f"kv-events-config {key} must be tcp://HOST:PORT, got {endpoint!r}")
    host, _, port = endpoint[6:].rpartition(":")
    if host.strip("[]") in ("*", "0.0.0.0", "::", ""):
        raise KVEventsConfigError(f"kv-events-config {key} {endpoint!r} binds every interface; "
                                  f"name the address to bind (127.0.0.1 or the node address)")
    if not port.isdecimal() or not 0 < int(port) < 65536:
        raise KVEventsConfigError(f"kv-events-config {key} needs a port in 1..65535, got {endpoint!r}")


def _opt(default: Any, help: str, **kw: Any) -> Any:
    return field(default=default, metadata={"help": help}, **kw)


@dataclass(frozen=True)
class EngineConfig:
    host: str = _opt("127.0.0.1", "address to bind the HTTP server to")
    port: int = _opt(8000, "HTTP port (0 picks a free one; the ready line names it)")
    served_model_name: str = _opt("p2p-tiny", "model name in /v1/models, requests and LMCache keys; peers must agree")
    lmcache_url: str = _opt("", "LMCache server request URL, e.g. tcp://127.0.0.1:5601; empty = plain engine")
    instance_id: str = _opt("", "label for logs and metrics (default engine-<port>)")
    chunk_size: int | None = _opt(None, f"prefill/LMCache chunk size in tokens (default: ask the server, else "
                                        f"{DEFAULT_CHUNK_SIZE})")
    # The fleet spec's engine section takes its defaults from here (p2p_ops/spec/settings.py), so a bare
    # `p2p-engine` runs the same model as a freshly rendered fleet.
    model_seed: int = _opt(1234, "seed of the model weights; every node of a fleet must use the same")
    num_layers: int = _opt(2, "transformer layers")
    num_heads: int = _opt(4, "attention heads (also KV heads)")
    head_size: int = _opt(32, "size of one attention head (even)")
    # The KV geometry stored and moved (p2p_runtime.profiles); num_layers/num_heads/head_size stay what is computed.
    profile: str = _opt("tiny", f"KV geometry stored in and moved through LMCache: {' | '.join(PROFILE_NAMES)} (tiny = "
                        "the computed geometry in float32; the others a real model's layers, KV heads, head size and "
                        "dtype, filled from the computed KV and checked on every load); peers must agree")
    vocab_size: int = _opt(384, f"vocabulary size (>= {FIRST_UNUSED_ID}: 256 bytes + BOS/EOS/PAD)")
    max_model_len: int = _opt(8192, "longest prompt + completion, in tokens")
    block_size: int = _opt(16, "tokens per paged KV block")
    num_blocks: int = _opt(2048, "KV blocks in the paged cache")
    max_num_seqs: int = _opt(8, "requests decoded concurrently; the rest wait")
    threads: int = _opt(1, "torch CPU threads (fixed for bitwise-reproducible KV)")
    # Above LMCache's own P2P lookup RPC timeout (3 s, p2p_l2_adapter._LOOKUP_RPC_TIMEOUT_S) and a server's
    # stop-the-world gen-2 collection (1.0-2.6 s measured with --enable-gc-monitor on a busy 2-core box): at 2 s
    # the engine gave up on working pulls (prefetch_timeout) and recomputed what its peer held.
    lmcache_timeout: float = _opt(5.0, "seconds before an LMCache RPC counts as failed (then: recompute)")
    lmcache_reconnect_interval: float = _opt(2.0, "seconds between reconnect attempts while LMCache is down")
    prefill_us_per_token: float = _opt(0.0, "emulated GPU prefill cost per computed prompt token (us); 0 = off")
    decode_ms_per_token: float = _opt(0.0, "emulated GPU cost per decode step (ms); 0 = off")
    load_us_per_token: float = _opt(0.0, "emulated cost per prompt token loaded from LMCache (us); 0 = off")
    timing_jitter: float = _opt(0.0, "relative jitter of emulated times, uniform in +-fraction (<= 0.7)")
    timing_seed: int = _opt(0, "seed of the timing jitter")
    log_level: str = _opt("info", "debug|info|warning|error")
    log_format: str = _opt("text", "text | json (one JSON object per line, for log shippers)")
    max_body_bytes: int = _opt(1 << 20, "largest request body accepted; larger ones get 413 before anything is parsed")
    max_queued: int = _opt(256, "requests allowed to wait for a slot; beyond that 429 with Retry-After")
    # Never in the "effective config" log line or any repr.
    api_key: str = _opt("", "require `Authorization: Bearer <key>` on every route but /health, /version, /metrics "
                        "(default: $P2P_ENGINE_API_KEY, else none)", repr=False)
    kv_events_config: str = _opt("", "KV-cache events as vLLM's --kv-events-config JSON, e.g. "
                                 "'{\"enable_kv_cache_events\": true, \"endpoint\": \"tcp://127.0.0.1:5557\"}'")

    def __post_init__(self) -> None:
        positive = ("num_layers", "num_heads", "head_size", "max_model_len", "block_size",
                    "num_blocks", "max_num_seqs", "threads", "max_body_bytes", "max_queued")
        for name in positive:
            if getattr(self, name) <= 0:
                raise ConfigError(f"--{_flag(name)} must be > 0, got {getattr(self, name)}")
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"--port must be within 0..65535, got {self.port}")
        if self.head_size % 2:
            raise ConfigError(f"--head-size must be even (rotary embeddings), got {self.head_size}")
        if self.vocab_size < FIRST_UNUSED_ID:
            raise ConfigError(f"--vocab-size must be >= {FIRST_UNUSED_ID}, got {self.vocab_size}")
        if self.chunk_size is not None:
            self.check_chunk_size(self.chunk_size)
        if self.num_blocks * self.block_size < self.max_model_len:
            need = math.ceil(self.max_model_len / self.block_size)
            raise ConfigError(f"--num-blocks {self.num_blocks} x --block-size {self.block_size} cannot hold one "
                              f"--max-model-len {self.max_model_len} request; use --num-blocks >= {need}")
        for name in ("prefill_us_per_token", "decode_ms_per_token", "load_us_per_token"):
            if getattr(self, name) < 0:
                raise ConfigError(f"--{_flag(name)} must be >= 0, got {getattr(self, name)}")
        # Like llm-d-sim's std-dev limits: jitter beyond this stops looking like one GPU.
        if not 0 <= self.timing_jitter <= 0.7:
            raise ConfigError(f"--timing-jitter must be within [0, 0.7], got {self.timing_jitter}")
        if self.lmcache_timeout <= 0 or self.lmcache_reconnect_interval <= 0:
            raise ConfigError("--lmcache-timeout and --lmcache-reconnect-interval must be > 0")
        if self.log_level.lower() not in ("debug", "info", "warning", "error"):
            raise ConfigError(f"--log-level must be debug|info|warning|error, got {self.log_level}")
        if self.log_format not in ("text", "json"):
            raise ConfigError(f"--log-format must be text or json, got {self.log_format}")
        try:
            self.kv_events
            self.kv_profile
        except ValueError as exc:
            raise ConfigError(str(exc)) from None

    def check_chunk_size(self, chunk_size: int) -> None:
        if chunk_size <= 0 or chunk_size % self.block_size:
            raise ConfigError(f"chunk size {chunk_size} must be a positive multiple of --block-size {self.block_size} "
                              "(LMCache moves whole blocks)")

    @property
    def kv_profile(self) -> KVProfile:
        return resolve_profile(self.profile, self.num_layers, self.num_heads, self.head_size)

    @property
    def kv_bytes(self) -> int:
        return self.num_blocks * self.block_size * self.kv_profile.bytes_per_token

    @property
    def kv_events(self) -> KVEventsConfig:
        return KVEventsConfig.from_json(self.kv_events_config)

    @property
    def label(self) -> str:
        return self.instance_id or f"engine-{self.port}"

    @classmethod
    def from_argv(cls, argv: list[str] | None = None) -> "EngineConfig":
        """Invalid values exit with status 2."""
        parser = build_parser()
        try:
            return cls(**vars(parser.parse_args(argv)))
        except ConfigError as exc:
            parser.error(str(exc))
            raise  # unreachable: parser.error exits


def _flag(name: str) -> str:
    return name.replace("_", "-")


def flag_type(f: Field) -> type:
    """The Python type of one EngineConfig field (annotations are strings under `from __future__`)."""
    return {"int": int, "float": float, "str": str, "int | None": int}[str(f.type)]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="p2p-engine", description="Embedded CPU engine: a vLLM-compatible OpenAI "
                                     "server over a tiny deterministic transformer whose paged KV cache is shared "
                                     "through LMCache.")
    for f in fields(EngineConfig):
        text = f.metadata["help"]
        default = f.default
        if f.name == "api_key":
            # From the environment (env.sh), so the key is never on a command line `ps` shows.
            default = os.environ.get("P2P_ENGINE_API_KEY", "")
        elif f.default not in (None, ""):
            text += " (default: %(default)s)"
        parser.add_argument(f"--{_flag(f.name)}", type=flag_type(f), default=default, help=text)
    return parser
