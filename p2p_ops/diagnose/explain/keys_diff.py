"""Why two instances' chunk keys differ: the key inputs they do not share, and where their tokens part.

A chunk key is LMCache's hash chain over the tokens, started from NONE_HASH, in chunks of the server's chunk
size, tagged with the model name, the world size (kv_rank) and the cache salt. Any of these differing makes
every key differ; PYTHONHASHSEED only through NONE_HASH (blake3 does not use it).
"""

from __future__ import annotations

from typing import Optional

from p2p_ops.diagnose.explain.model import InstanceView
from p2p_ops.spec.agreement import split

_FIELDS = ("chunk_size", "hash_algorithm", "model_name", "world_size", "cache_salt")


def _none_hash(v: InstanceView) -> Optional[str]:
    """The server's own NONE_HASH (its log) when known, else what LMCache's hasher gave on its node."""
    return v.logged_none_hash or (v.keys.none_hash if v.keys else None)


def key_inputs(v: InstanceView) -> dict[str, str]:
    """What this instance's keys depend on, by name (only what is known)."""
    if v.inputs is None:
        return {}
    out = {f: str(getattr(v.inputs, f)) for f in _FIELDS}
    out["PYTHONHASHSEED"] = v.inputs.python_hash_seed if v.inputs.python_hash_seed is not None else "(unset)"
    nh = _none_hash(v)
    if nh is not None:
        out["NONE_HASH"] = nh if len(nh) <= 24 else nh[:21] + "..."
    if v.hash_fallback:
        out["hash_fallback"] = f"builtin (could not load {v.hash_fallback} from vLLM)"
    return out


def differing_inputs(x: InstanceView, p: InstanceView) -> list[str]:
    """`name: x=value, p=value` for each key input the two differ in (the seed only where NONE_HASH differs,
    since that is the only way it enters a key)."""
    a, b = key_inputs(x), key_inputs(p)
    out = []
    for name in (*_FIELDS, "NONE_HASH", "PYTHONHASHSEED", "hash_fallback"):
        if a.get(name) == b.get(name) or (name == "PYTHONHASHSEED" and a.get("NONE_HASH") == b.get("NONE_HASH")):
            continue
        out.append(f"{name}: {x.instance}={a.get(name, '-')}, {p.instance}={b.get(name, '-')}")
    if x.keys and x.keys.builtin_hash:
        out.append(f"{x.instance}'s server hashes with Python's builtin hash(), whose NONE_HASH differs per "
                   "process: no other process can have its keys")
    return out


def input_differences(views: list[InstanceView]) -> list[str]:
    """Fleet-wide: each key input on which the serving instances split, naming the odd one out and whether
    the difference reaches the keys."""
    serving = [v for v in views if v.serving]
    table = {v.instance: key_inputs(v) for v in serving}
    out = []
    for name in (*_FIELDS, "PYTHONHASHSEED", "NONE_HASH", "hash_fallback"):
        values = {inst: vals[name] for inst, vals in table.items() if name in vals}
        if name == "hash_fallback":
            values = {inst: table[inst].get(name, "no") for inst in table}
        if len(set(values.values())) <= 1:
            continue
        line = f"{name}: {split(values).describe(name)}"
        if name == "PYTHONHASHSEED" and len({table[i].get('NONE_HASH') for i in values}) == 1:
            line += ("; harmless here: NONE_HASH is identical on every server (blake3 and LMCache's own "
                     "NONE_HASH do not use the seed), so the keys agree")
        out.append(line)
    return out


def first_difference(a: list[int], b: list[int], end: int) -> Optional[tuple[int, object, object]]:
    """(position, a's token, b's token) of the first difference within [0, end), or None."""
    for i in range(min(end, max(len(a), len(b)))):
        ta = a[i] if i < len(a) else "(end)"
        tb = b[i] if i < len(b) else "(end)"
        if ta != tb:
            return i, ta, tb
    return None
