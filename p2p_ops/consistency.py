"""What each running peer actually uses for the settings that must match, and where they disagree.

The #1 field failure is silent: peers that hash differently share nothing and report no error. The spec
check refuses such a fleet before launch; this module looks at a *running* fleet (a hand-edited env.sh, a
server started by hand) from two sources: the server's own /status, and the environment of its process.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Optional

from p2p_ops import probes

# (label, where it comes from). Process-environment keys are read from /proc/<pid>/environ.
ENV_KEYS = ("PYTHONHASHSEED", "LMCACHE_CHUNK_SIZE", "LMCACHE_HASH_ALGORITHM", "LMCACHE_L1_ALIGN_BYTES",
            "LMCACHE_P2P_TRANSFER_ENGINE", "P2P_MODEL")
# The embedded engines must run the same model, or the same KV means different things to them.
ENGINE_ENV_KEYS = ("P2P_ENGINE_MODEL_SEED", "P2P_ENGINE_NUM_LAYERS", "P2P_ENGINE_NUM_HEADS",
                   "P2P_ENGINE_HEAD_SIZE")

FIXES = {
    "chunk_size": "set settings.chunk_size once in fleet.yaml (and the coordinator's --chunk-size), re-render, restart",
    "hash_algorithm": "set settings.hash_algorithm once in fleet.yaml, re-render, restart every server",
    "PYTHONHASHSEED": "set settings.python_hash_seed once in fleet.yaml and restart every server; it seeds the "
                      "hash chain with the builtin hash or whenever vLLM is importable",
    "LMCACHE_L1_ALIGN_BYTES": "set settings.l1_align_bytes once (65536), restart every server",
    "LMCACHE_P2P_TRANSFER_ENGINE": "use one settings.transfer_engine for every server",
    "P2P_MODEL": "serve one model name on every engine (it is part of every cache key)",
    "P2P_ENGINE_MODEL_SEED": "use one engine.model_seed for the fleet: the same KV means something else to "
                             "another model",
}


@dataclass
class PeerSettings:
    instance: str
    values: dict[str, Optional[str]] = field(default_factory=dict)


@dataclass
class Mismatch:
    key: str
    values: dict[str, Optional[str]]  # instance -> value

    def describe(self) -> str:
        shown = ", ".join(f"{i}={v}" for i, v in sorted(self.values.items()))
        return f"{self.key} differs across peers ({shown}); fix: {FIXES.get(self.key, 'make them identical')}"


def process_env(conn, pidfile: str, keys: tuple[str, ...] = ENV_KEYS) -> dict[str, Optional[str]]:
    """Selected variables from the environment of the process named by a pidfile (None if unreadable)."""
    pf = shlex.quote(pidfile)
    res = conn.run(f"pid=$(cat {pf} 2>/dev/null) && tr '\\0' '\\n' < /proc/$pid/environ", timeout=15)
    env: dict[str, Optional[str]] = {k: None for k in keys}
    if not res.ok:
        return env
    for line in res.stdout.splitlines():
        k, _, v = line.partition("=")
        if k in env:
            env[k] = v
    return env


def collect(ctx) -> list[PeerSettings]:
    """For every instance: /status chunk size and hash, plus its server process's environment."""
    out = []
    for node, inst in ctx.fleet.instances():
        st = probes.server_status(ctx.server_url(node, inst))
        values: dict[str, Optional[str]] = {
            "chunk_size": str(st.chunk_size) if st.chunk_size is not None else None,
            "hash_algorithm": st.hash_algorithm,
        }
        values.update(process_env(ctx.conn(node), ctx.server_proc(node, inst).pidfile))
        if ctx.fleet.runtime == "embedded":
            values.update(process_env(ctx.conn(node), ctx.engine_proc(node, inst).pidfile, ENGINE_ENV_KEYS))
        out.append(PeerSettings(inst.id, values))
    return out


def mismatches(peers: list[PeerSettings]) -> list[Mismatch]:
    """Keys whose known values differ between peers (unknown values are not evidence either way)."""
    keys = sorted({k for p in peers for k in p.values})
    found = []
    for key in keys:
        values = {p.instance: p.values.get(key) for p in peers}
        known = {v for v in values.values() if v is not None}
        if len(known) > 1:
            found.append(Mismatch(key, values))
    # chunk_size from /status and LMCACHE_CHUNK_SIZE say the same thing: report it once.
    if any(m.key == "chunk_size" for m in found):
        found = [m for m in found if m.key != "LMCACHE_CHUNK_SIZE"]
    if any(m.key == "hash_algorithm" for m in found):
        found = [m for m in found if m.key != "LMCACHE_HASH_ALGORITHM"]
    return found
