"""The chunk keys a node's lmcache server gives a token sequence, computed on that node by LMCache itself.

The node's own interpreter runs LMCache's `TokenHasher` and `resolve_object_keys` (the functions the server
and the coordinator's `/directory/lookup` use) with the server's chunk size, hash algorithm, model name, world
size and PYTHONHASHSEED, so the keys are the server's, not a re-implementation's: a node with another lmcache
version, or with vLLM importable (whose NONE_HASH depends on the seed), gives what its server gives.

`none_hash` is printed the way the server logs it (`Computed NONE_HASH=<this> using hash function`), so it
can be compared with the server's log line. `builtin_hash` says LMCache fell back to Python's hash(): its
NONE_HASH differs per process, so no other process can reproduce the server's keys.
"""

from __future__ import annotations

import base64
import json
import struct
import zlib
from dataclasses import asdict, dataclass, field
from typing import Optional

from p2p_ops import files
from p2p_ops.errors import BadInput
from p2p_ops.facts.base import CommandFact

MARK = "@@p2p-keys "
# One argument stays under Linux's 128 KiB per-argument limit; the token blob is split into several.
_ARG_BYTES = 100_000

_SCRIPT = r"""
import base64, json, struct, sys, zlib
a = json.loads(sys.argv[1])
raw = zlib.decompress(base64.b64decode("".join(sys.argv[2:])))
tokens = list(struct.unpack(">%dI" % (len(raw) // 4), raw))
from lmcache.v1.multiprocess.token_hasher import TokenHasher
from lmcache.v1.multiprocess.cache_control.key_resolver import resolve_object_keys
h = TokenHasher(a["chunk_size"], a["hash_algorithm"])
keys, n = resolve_object_keys(h, a["model_name"], a["world_size"], tokens, a["cache_salt"])
per = max(1, len(keys) // n) if n else 1
enc = [{"chunk_hash_hex": k.chunk_hash.hex(), "model_name": k.model_name, "kv_rank": k.kv_rank,
        "object_group_id": k.object_group_id, "cache_salt": k.cache_salt} for k in keys]
print("@@p2p-keys " + json.dumps({"chunks": n, "none_hash": str(h.none_hash), "builtin_hash": h.hash_func is hash,
                                 "keys": [enc[i * per:(i + 1) * per] for i in range(n)]}))
"""


@dataclass(frozen=True)
class KeyInputs:
    chunk_size: int
    hash_algorithm: str
    model_name: str
    world_size: int = 1
    cache_salt: str = ""
    python_hash_seed: Optional[str] = None    # the server's PYTHONHASHSEED; None: unset there


@dataclass
class ChunkKeys:
    chunks: int = 0
    none_hash: Optional[str] = None
    builtin_hash: bool = False
    keys: list[list[dict]] = field(default_factory=list)
    error: Optional[str] = None

    def hashes(self) -> list[str]:
        # The ranks of a chunk share its hash.
        return [ranks[0]["chunk_hash_hex"] if ranks else "" for ranks in self.keys]


def pack_tokens(token_ids: list[int]) -> list[str]:
    blob = base64.b64encode(zlib.compress(struct.pack(f">{len(token_ids)}I", *token_ids))).decode()
    return [blob[i:i + _ARG_BYTES] for i in range(0, len(blob), _ARG_BYTES)] or [""]


def parse_chunk_keys(text: str) -> ChunkKeys:
    for line in reversed(text.splitlines()):
        if line.startswith(MARK):
            try:
                data = files.parse_json(line[len(MARK):], "the hasher")
            except BadInput:
                break
            return ChunkKeys(int(data["chunks"]), data.get("none_hash"), bool(data.get("builtin_hash")),
                             list(data.get("keys") or []))
    tail = "\n".join(text.strip().splitlines()[-3:])
    return ChunkKeys(error=f"LMCache's hasher did not answer: {tail[-300:] or '(no output)'}")


def chunk_keys_fact(python: str, inputs: KeyInputs, token_ids: list[int]) -> CommandFact[ChunkKeys]:
    args = json.dumps({k: v for k, v in asdict(inputs).items() if k != "python_hash_seed"})
    seed = (("-u", "PYTHONHASHSEED") if inputs.python_hash_seed is None
            else (f"PYTHONHASHSEED={inputs.python_hash_seed}",))
    argv = ("env", *seed, "LMCACHE_LOG_LEVEL=WARNING", "LMCACHE_TRACK_USAGE=false", "DO_NOT_TRACK=1",
            python, "-c", _SCRIPT, args, *pack_tokens(token_ids))
    return CommandFact("chunk_keys", tuple(argv), parse_chunk_keys)
