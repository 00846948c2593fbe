"""What each peer uses for every must-agree key (`p2p_ops.spec.agreement`), and where each value was read.

Sources, best first: what the running server reports (/status, /config, /lmc_version, its log), its process
environment, then its env.sh (or the spec's rendering when there is none yet).
"""

from __future__ import annotations

import re
from typing import Optional

from p2p_ops.diagnose.doctor.model import InstanceFacts
from p2p_ops.diagnose.redact import redact_text
from p2p_ops.facts.python_env import version_of
from p2p_ops.spec.agreement import engine_model

_KEEP_ENV = re.compile(r"^(PYTHONHASHSEED|LMCACHE_|P2P_|UCX_|NIXL_)")


def safe_env(env: dict[str, str]) -> dict[str, str]:
    """Only the variables the checks read, and none whose name or value looks like a credential: the doctor's
    JSON goes into reports and bundles."""
    return {k: v for k, v in env.items() if _KEEP_ENV.match(k) and not redact_text(f"{k}={v}").redactions}


def context_meta(status: Optional[dict]) -> list[dict]:
    """Engine registrations from /status: `cache_context_meta` (0.5.6), `gpu_context_meta` (docs) and
    `non_cuda_context_meta` (CPU engines), each `{id: {model_name, world_size, ...}}`."""
    if not isinstance(status, dict):
        return []
    out = []
    for key in ("cache_context_meta", "gpu_context_meta", "non_cuda_context_meta"):
        section = status.get(key)
        if isinstance(section, dict):
            out += [v for v in section.values() if isinstance(v, dict)]
    return out


def config_align_bytes(config: Optional[dict]) -> Optional[str]:
    if not isinstance(config, dict):
        return None
    sm = config.get("storage_manager") or {}
    cfgs = list(sm.get("l1_manager_configs") or []) + [sm.get("l1_manager_config") or {}]
    cfgs += list((config.get("mp") or {}).get("l1_manager_configs") or [])
    for c in cfgs:
        align = ((c or {}).get("memory_config") or {}).get("align_bytes")
        if align is not None:
            return str(align)
    return None


def _first(*candidates: tuple[Optional[object], str]) -> Optional[tuple[str, str]]:
    for value, source in candidates:
        if value is not None and value != "":
            return str(value), source
    return None


def observed(inst: InstanceFacts, packages: dict[str, Optional[str]]) -> dict[str, tuple[str, str]]:
    """What one instance uses for each must-agree key: (value, where it was read), best source first."""
    pe, ef, st = inst.process_env, inst.env_file or {}, inst.status or {}
    envsrc = "spec (not rendered)" if inst.env_file_rendered else "env.sh"
    cfg_engine = ((inst.config or {}).get("mp") or {}).get("p2p_config", {}).get("transfer_engine") \
        if isinstance(inst.config, dict) else None
    metas = context_meta(inst.status)
    models = ",".join(sorted({str(m.get("model_name")) for m in metas if m.get("model_name")})) or None
    worlds = ",".join(sorted({str(m.get("world_size")) for m in metas if m.get("world_size") is not None})) or None

    def env(name: str) -> list[tuple[Optional[str], str]]:
        return [(pe.get(name), "process"), (ef.get(name), envsrc)]
    candidates = {
        "PYTHONHASHSEED": env("PYTHONHASHSEED"),
        "chunk_size": [(st.get("chunk_size"), "/status"), *env("LMCACHE_CHUNK_SIZE")],
        "hash_algorithm": [(st.get("hash_algorithm"), "/status"), *env("LMCACHE_HASH_ALGORITHM")],
        "l1_align_bytes": [(config_align_bytes(inst.config), "/config"), *env("LMCACHE_L1_ALIGN_BYTES")],
        "transfer_engine": [(cfg_engine, "/config"), *env("LMCACHE_P2P_TRANSFER_ENGINE")],
        "model": [(models, "/status context meta"), *env("P2P_MODEL")],
        "world_size": [(worlds, "/status context meta")],
        "lmcache_version": [(inst.lmc_version, "/lmc_version"), (version_of(packages, "lmcache"), "node python")],
        "nixl_version": [(version_of(packages, "nixl"), "node python")],
        "NONE_HASH": [(inst.none_hash, "server.log")],
        "engine_model": [(engine_model(inst.engine_env), "engine process"), (engine_model(ef), envsrc)],
    }
    for key in ("vllm_block_size", "vllm_parallel", "vllm_dtype", "vllm_kv_cache_dtype", "vllm_model"):
        candidates[key] = [(inst.engine_flags.get(key), "engine command line")]
    vllm = bool(inst.engine_flags.get("vllm_model"))
    candidates["vllm_version"] = [(version_of(packages, "vllm") if vllm else None, "node python")]
    candidates["vllm_hash_seed"] = [(inst.engine_env.get("PYTHONHASHSEED") if vllm else None, "engine process")]
    out = {key: got for key, cands in candidates.items() if (got := _first(*cands))}
    ucx, where = (pe, "process") if inst.running and pe else (ef, envsrc)
    out["UCX_TLS"] = (ucx.get("UCX_TLS") or "(unset)", where)
    out["UCX_NET_DEVICES"] = (ucx.get("UCX_NET_DEVICES") or "", where)
    return out


