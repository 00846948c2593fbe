"""What peers must agree on, or they silently share nothing (DESIGN decision 6), and the one check for it.

Every chunk key LMCache computes depends on the hash seed, the chunk size, the hash algorithm and the model; a
peer that differs in any of them finds nothing on the others and reports no error. This list is the single
source: `validate` refuses a per-instance override of a spec setting here (`FLEET_WIDE_ONLY`), and `doctor` reads each
peer's value and names the odd one out (`split`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Mapping, Optional


@dataclass(frozen=True)
class MustAgree:
    key: str
    cause: str                        # the catalogue's id (p2p_ops.causes), whose fix says how to make them agree
    spec: Optional[str] = None        # the fleet spec setting (fleet-wide only), if the spec sets it
    env: Optional[str] = None         # the variable env.sh sets and the server's process carries
    severity: Literal["error", "warn"] = "error"   # warn: peers may still share, but should not differ


MUST_AGREE: tuple[MustAgree, ...] = (
    MustAgree("PYTHONHASHSEED", "hash_seed_differs", spec="python_hash_seed", env="PYTHONHASHSEED"),
    MustAgree("chunk_size", "chunk_size_differs", spec="chunk_size", env="LMCACHE_CHUNK_SIZE"),
    MustAgree("hash_algorithm", "hash_algorithm_differs", spec="hash_algorithm", env="LMCACHE_HASH_ALGORITHM"),
    MustAgree("l1_align_bytes", "l1_align_differs", spec="l1_align_bytes", env="LMCACHE_L1_ALIGN_BYTES"),
    MustAgree("transfer_engine", "transfer_engine_differs", spec="transfer_engine", env="LMCACHE_P2P_TRANSFER_ENGINE"),
    MustAgree("model", "model_differs", spec="model", env="P2P_MODEL"),
    MustAgree("world_size", "world_size_differs"),
    # P2P RPC payloads are not compatible across versions.
    MustAgree("lmcache_version", "versions_differ"),
    MustAgree("nixl_version", "versions_differ", severity="warn"),
    MustAgree("NONE_HASH", "none_hash_differs"),
    MustAgree("engine_model", "engine_model_differs"),
    MustAgree("UCX_TLS", "ucx_tls_differs", env="UCX_TLS", severity="warn"),
    # runtime: vllm. What llm-d's P2P path seeds on and LMCache's connector needs too: a KV block means the same
    # bytes on every engine only with one block size, parallel layout, dtype, KV-cache dtype and model revision,
    # and vLLM's own block hashes (its prefix cache, its KV events) agree only with one PYTHONHASHSEED.
    MustAgree("vllm_block_size", "vllm_args_differ"),
    MustAgree("vllm_parallel", "vllm_args_differ"),
    MustAgree("vllm_dtype", "vllm_args_differ"),
    MustAgree("vllm_kv_cache_dtype", "vllm_args_differ"),
    MustAgree("vllm_model", "vllm_args_differ"),
    MustAgree("vllm_version", "versions_differ"),
    MustAgree("vllm_hash_seed", "hash_seed_differs"),
)
BY_KEY = {m.key: m for m in MUST_AGREE}
FLEET_WIDE_ONLY = tuple(m.spec for m in MUST_AGREE if m.spec)
# The must-agree variables of a server's environment (read from /proc/<pid>/environ, never the whole of it).
SERVER_ENV = tuple(m.env for m in MUST_AGREE if m.env)
# The embedded engine's model is its seed and shape, and the KV profile its bytes are laid out in: two engines
# differing here give the same KV another meaning (or another size).
ENGINE_MODEL_ENV = ("P2P_ENGINE_MODEL_SEED", "P2P_ENGINE_NUM_LAYERS", "P2P_ENGINE_NUM_HEADS", "P2P_ENGINE_HEAD_SIZE",
                    "P2P_ENGINE_PROFILE")


def engine_model(env: Optional[Mapping[str, Optional[str]]]) -> Optional[str]:
    """One comparable value for an embedded engine's model, from its environment or env.sh."""
    if not env or all(env.get(k) is None for k in ENGINE_MODEL_ENV):
        return None
    shape = "seed={} layers={} heads={} head_size={}".format(*(env.get(k) for k in ENGINE_MODEL_ENV[:4]))
    profile = env.get("P2P_ENGINE_PROFILE")
    return shape + (f" profile={profile}" if profile is not None else "")


@dataclass
class Split:
    """How the peers split on one must-agree value: the majority's value and members, and the odd ones out.

    With no strict majority (a tie, e.g. 1 vs 1) there is no odd one out: `odd` is empty and `tie` True."""

    majority_value: Optional[str]
    majority: list[str]
    odd: dict[str, str]       # peer -> its value, for every peer outside the majority
    tie: bool = False

    def describe(self, key: str) -> str:
        odd = ", ".join(f"{p}={v}" for p, v in sorted(self.odd.items()))
        if self.tie:
            return odd + " (no majority)"
        return f"{odd} (the odd one out; {', '.join(sorted(self.majority))} use {key}={self.majority_value})"


def split(values: Mapping[str, object]) -> Split:
    counts: dict[str, list[str]] = {}
    for peer, value in values.items():
        counts.setdefault(str(value), []).append(peer)
    ranked = sorted(counts.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    if len(ranked) > 1 and len(ranked[0][1]) == len(ranked[1][1]):
        return Split(None, [], {p: str(values[p]) for p in values}, tie=True)
    top, members = ranked[0] if ranked else (None, [])
    return Split(top, sorted(members), {p: str(v) for p, v in values.items() if str(v) != top})


# vLLM flags behind the vllm_* must-agree keys, with vLLM's defaults when a flag is absent.
VLLM_FLAGS: dict[str, tuple[tuple[str, ...], str]] = {
    "block_size": (("--block-size",), "default"),
    "tensor_parallel": (("--tensor-parallel-size", "-tp"), "1"),
    "pipeline_parallel": (("--pipeline-parallel-size", "-pp"), "1"),
    "dtype": (("--dtype",), "auto"),
    "kv_cache_dtype": (("--kv-cache-dtype",), "auto"),
    "model": (("--model",), ""),
    "revision": (("--revision",), "main"),
}


def vllm_values(argv: list[str]) -> dict[str, str]:
    """The vllm_* values of a vLLM command line (`--flag v` or `--flag=v`; the last one wins, as argparse); {} for
    another program's."""
    if not any("vllm" in w for w in argv[:3]):
        return {}
    f = {name: default for name, (_, default) in VLLM_FLAGS.items()}
    for i, word in enumerate(argv):
        flag, eq, inline = word.partition("=")
        for name, (flags, _) in VLLM_FLAGS.items():
            if flag in flags:
                f[name] = inline if eq else (argv[i + 1] if i + 1 < len(argv) else "")
    return {"vllm_block_size": f["block_size"],
            "vllm_parallel": f"tp={f['tensor_parallel']} pp={f['pipeline_parallel']}",
            "vllm_dtype": f["dtype"], "vllm_kv_cache_dtype": f["kv_cache_dtype"],
            "vllm_model": f"{f['model']}@{f['revision']}"}
