"""The KV pull at a real model's size: prefixes of 1k tokens and more at a real profile's bytes per token.

`kv_path` decomposes the pull at the engine's tiny geometry (2 KiB per token), where fixed round trips dominate.
Here the same pull (a real P2P lookup + NIXL READ into the reader server's L1 + retrieve into paged KV blocks)
moves a real model's KV (p2p_runtime.profiles: llama-3-8b 128 KiB per token, so 4k tokens are 512 MiB), and
bandwidth is what is measured. This process acts as the two engines: a writer registers bf16 paged KV tensors
of the profile's layout with server A and stores a fresh prefix, a reader registered with server B pulls it, and
every pull is checked bitwise against what was stored. Both servers offer their L1 as shared memory, as
`init --profile` fleets do (pickled tensors moved ~10 MB/s at this size). Beside it, in the same run: memcpy of the same bytes (one
core), a miss lookup (the P2P round trip with nothing to move), and LMCache's own transfer-channel benchmark
(`p2p_ops.bench.channel`: NIXL over the fleet's UCX settings, L1 objects of one chunk each, as many as the prefix has,
every byte verified), run after the fleet is down so the two never share the box.

Each server's L1 is sized for the largest prefix twice over (its own and a pulled copy), with the profile's chunk
and page sizes; lengths that would not fit this box's MemAvailable are skipped and said so.
"""

from __future__ import annotations

import contextlib
import os
import random
import statistics
import time
import uuid
import zlib

import torch

from p2p_ops.lifecycle import launch
from p2p_ops.lifecycle.free_ports import choose
from p2p_ops.spec.starter import local_fleet
from bench.suite.kv_path import memcpy_s
from p2p_ops.spec.sizing import GIB, box_budget_gib
from p2p_runtime.config import EngineConfig
from p2p_runtime.model import configure_threads
from p2p_runtime.profiles import PROFILES, KVProfile

# (profile, lengths in tokens) per size; bench-quick keeps to one profile and two lengths (128 and 512 MiB).
PLAN = {"tiny": [("llama-3-8b", [512])],
        "quick": [("llama-3-8b", [1024, 4096])],
        "full": [("llama-3-8b", [1024, 4096, 8192, 16384, 32768]), ("qwen3-32b", [1024, 4096, 8192, 16384])]}
REPEATS = {"tiny": 1, "quick": 3, "full": 3}
VOCAB = 384


class Side:
    """One in-process 'engine' at a profile's geometry, registered with one server."""

    def __init__(self, mp_url: str, label: str, profile: KVProfile, num_blocks: int) -> None:
        from p2p_runtime.lmcache_adapter import KVRegistration, LMCacheAdapter

        self.profile = profile
        shape = (2, num_blocks, profile.block_size, profile.kv_heads, profile.head_size)
        self.tensors = {f"layer.{i}": torch.zeros(shape, dtype=profile.torch_dtype) for i in range(profile.layers)}
        reg = KVRegistration(model_name=f"bench-{profile.name}", tensors=self.tensors, num_layers=profile.layers,
                             block_size=profile.block_size,
                             worker_id=zlib.crc32(f"{label}/{os.getpid()}".encode()) & 0x7FFFFFFF)
        self.adapter = LMCacheAdapter(mp_url, reg, timeout_s=120.0)
        if not self.adapter.start(profile.chunk_size):
            self.adapter.close()
            raise RuntimeError(f"could not register with the lmcache server at {mp_url}")

    def blocks(self, n_blocks: int) -> list[torch.Tensor]:
        return [t[:, :n_blocks] for t in self.tensors.values()]

    def close(self) -> None:
        self.adapter.close()


def pull_once(writer: Side, reader: Side, tokens: list[int], during=contextlib.nullcontext) -> dict:
    """Store `tokens` through `writer`, pull them through `reader` (a P2P hit) inside `during()` (a profiler's
    window: bench/profile_pull.py), check every byte."""
    p = writer.profile
    n_chunks = (len(tokens) - 1) // p.chunk_size
    n_blocks = n_chunks * p.chunk_size // p.block_size
    blocks = list(range(n_blocks))
    for t in writer.blocks(n_blocks):
        t.normal_()
    for t in reader.blocks(n_blocks):
        t.zero_()
    sw, sr, sm = (f"{k}-{uuid.uuid4().hex[:12]}" for k in ("rw", "rr", "rm"))
    writer.adapter.store(sw, tokens, 0, n_chunks, blocks)
    writer.adapter.end_session(sw)
    with during():
        t0 = time.monotonic()
        hits = reader.adapter.lookup(sr, tokens, n_chunks)
        t1 = time.monotonic()
        if hits:
            reader.adapter.retrieve(sr, tokens, hits, blocks[: hits * p.chunk_size // p.block_size])
        t2 = time.monotonic()
    reader.adapter.end_session(sr)
    ok = hits == n_chunks and all(torch.equal(a, b) for a, b in zip(writer.blocks(n_blocks), reader.blocks(n_blocks)))
    fresh = [(t + 1) % VOCAB for t in tokens]
    t3 = time.monotonic()
    reader.adapter.lookup(sm, fresh, n_chunks)
    t4 = time.monotonic()
    reader.adapter.end_session(sm)
    return {"ok": ok, "bytes": n_chunks * p.chunk_bytes, "lookup": t1 - t0, "retrieve": t2 - t1, "pull": t2 - t0,
            "miss": t4 - t3}


def _fits(profile: KVProfile, n: int) -> float:
    """GiB a run at n tokens needs: two servers' L1 (2 prefixes each) + the two sides' KV tensors."""
    prefix = n * profile.bytes_per_token / GIB
    return 2 * (2 * prefix + 0.25) + 2 * prefix + 2.5  # + the fleet's processes (sizing's bases, rounded up)


def run(report) -> None:
    t = report.table("kv_real", "KV pull at real model sizes (ms and MB/s, medians; every pull checked bitwise)",
                     ["profile", "KiB/token", "tokens", "MiB", "lookup ms", "retrieve ms", "pull ms", "pull MB/s",
                      "LMCache channel MB/s", "pull / channel", "mooncake_te channel MB/s", "memcpy MB/s",
                      "miss lookup ms", "verified"],
                     plot=("MiB", ["pull MB/s", "LMCache channel MB/s", "mooncake_te channel MB/s", "memcpy MB/s"],
                           "MB/s", True))
    budget = box_budget_gib()
    for name, lengths in PLAN[report.size]:
        profile = PROFILES[name]
        fit = [n for n in lengths if budget is None or _fits(profile, n) <= budget]
        if len(fit) < len(lengths):
            report.note(t, f"{name}: skipped {[n for n in lengths if n not in fit]} tokens: they need more than this "
                           f"box's budget of {budget:.1f} GiB (75% of MemAvailable)")
        if fit:
            _measure(report, t, profile, fit, REPEATS[report.size])
    _target(report)


@contextlib.contextmanager
def sides(profile: KVProfile, top: int, threads: int = EngineConfig.threads):
    """A 2-node fleet sized for prefixes up to `top` tokens, a writer on node A and a reader on node B, warmed by
    one pull; yields (fleet context, writer, reader, a random source of prefixes). This process copies as the
    engine does, with the engine's torch threads: with two on this 2-core box, beside two servers that poll, a
    512 MiB retrieve's copies waited on each other in libgomp (bench/README.md, "Where the real-size pull goes")."""
    configure_threads(threads)
    l1 = max(1, -(-2 * top * profile.bytes_per_token // GIB) + 1)
    # shm: what `init --profile` fleets run; over pickled tensors a 128 MiB retrieve took 12.5 s here (spec.starter).
    settings = {"chunk_size": profile.chunk_size, "l1_align_bytes": profile.l1_align_bytes, "l1_size_gb": l1,
                "shm_transport": True}
    num_blocks = top // profile.block_size + profile.chunk_size // profile.block_size
    data = local_fleet(2, name=f"bench-{profile.name}", base=choose(2).base)
    data["settings"].update(settings)
    with launch.temporary(data) as ctx:
        (na, ia), (nb, ib) = ctx.fleet.instances()[:2]
        writer = Side(f"tcp://{na.address}:{ia.ports.mp}", "writer", profile, num_blocks)
        reader = Side(f"tcp://{nb.address}:{ib.ports.mp}", "reader", profile, num_blocks)
        try:
            rng = random.Random(19)
            pull_once(writer, reader, [rng.randrange(VOCAB) for _ in range(profile.chunk_size + 1)])  # warm
            yield ctx, writer, reader, rng
        finally:
            writer.close()
            reader.close()


def _measure(report, t, profile: KVProfile, lengths: list[int], repeats: int) -> None:
    with sides(profile, max(lengths)) as (ctx, writer, reader, rng):
        measured = {n: [pull_once(writer, reader, [rng.randrange(VOCAB) for _ in range(n + 1)])
                        for _ in range(repeats)] for n in lengths}
        ucx = (ctx.fleet.settings.ucx_tls, ctx.fleet.settings.ucx_net_devices)
    chan = _channel_mbps(report, t, profile, lengths, ucx)
    # The same objects through Mooncake's transfer engine (issue 29: both engines at the same sizes).
    moon = _channel_mbps(report, t, profile, lengths, ucx, "mooncake_te")
    for n, rows in measured.items():
        _row(report, t, profile, n, rows, chan.get(n), moon.get(n))


def _channel_mbps(report, t, profile: KVProfile, lengths: list[int], ucx: tuple[str, str],
                  engine: str = "nixl") -> dict[int, float]:
    """tokens -> LMCache's transfer-channel MB/s (median) on `engine` for that prefix's chunks; {} when it could
    not run (a note says why)."""
    import tempfile

    from p2p_ops.bench import channel
    from p2p_ops.connectors import LocalConnector
    from p2p_ops.lifecycle.free_ports import free_port

    if engine == "mooncake_te" and (why := _mooncake_absent()):
        report.note(t, f"the mooncake_te channel column did not run: {why}")
        return {}
    counts = [n // profile.chunk_size for n in lengths]  # pull_once pulls n // chunk of n + 1 tokens
    opts = channel.Options(object_size=profile.chunk_bytes, counts=counts, page_size=profile.l1_align_bytes,
                           channel_type=engine)
    env = channel.transport_env(*ucx)
    try:
        with tempfile.TemporaryDirectory(prefix="chan-") as tmp:
            sides = [channel.Side(LocalConnector("bench"), "127.0.0.1", workdir=f"{tmp}/{r}", env=env)
                     for r in ("server", "client")]
            runs = channel.run_channel(*sides, opts, channel.Ports(free_port(), free_port(), free_port()))
    except Exception as exc:  # noqa: BLE001 - the pull figures stand without the column
        report.note(t, f"LMCache's transfer-channel benchmark ({engine}) did not run: {exc}")
        return {}
    out = {}
    for n, run in zip(lengths, runs):
        if run.ok and run.median_gbps and run.verified is not False:
            out[n] = run.median_gbps * 1e3
        else:
            report.note(t, f"{engine} channel at {run.num_objects} objects: {run.error or 'no figure'}")
    return out


def _mooncake_absent() -> str:
    """Why Mooncake's transfer engine cannot run here, in one line; "" when it imports. Without this check the
    channel's own server printed LMCache's `Unsupported transfer_channel_type` traceback into the run (issue 47)."""
    import sys

    from p2p_ops.causes import CAUSES
    from p2p_ops.facts.python_env import python_env_fact
    from p2p_ops.lifecycle.preflight.readiness import mooncake_problem

    problem = mooncake_problem("mooncake_te", python_env_fact(sys.executable).collect())
    return f"{problem}; {CAUSES['mooncake_broken'].fix}" if problem else ""


def _row(report, t, profile: KVProfile, n: int, rows: list[dict], chan: float | None, moon: float | None) -> None:
    med = {k: statistics.median(r[k] for r in rows) for k in ("lookup", "retrieve", "pull", "miss")}
    nbytes = rows[0]["bytes"]
    mbps = nbytes / med["pull"] / 1e6
    mem = nbytes / memcpy_s(nbytes, repeats=3) / 1e6
    report.add_row(t, **{"profile": profile.name, "KiB/token": profile.bytes_per_token // 1024, "tokens": n,
                         "MiB": nbytes / 2**20, "lookup ms": med["lookup"] * 1e3, "retrieve ms": med["retrieve"] * 1e3,
                         "pull ms": med["pull"] * 1e3, "pull MB/s": mbps, "LMCache channel MB/s": chan,
                         "pull / channel": mbps / chan if chan else None, "mooncake_te channel MB/s": moon,
                         "memcpy MB/s": mem,
                         "miss lookup ms": med["miss"] * 1e3,
                         "verified": f"{sum(r['ok'] for r in rows)}/{len(rows)}"})
    report.facts.setdefault("real_pull", []).append({"profile": profile.name, "tokens": n, "MiB": nbytes / 2**20,
                                                     "mbps": mbps, "channel": chan, "ok": all(r["ok"] for r in rows),
                                                     **{f"{k}_ms": med[k] * 1e3 for k in ("lookup", "retrieve", "pull")}})


def _target(report) -> None:
    rows = report.facts.get("real_pull", [])
    goal = ">= 50% of LMCache's transfer-channel benchmark at >= 64 MiB"
    if not rows:
        report.target("real-size pull vs LMCache channel", goal, "no length fitted this box", None)
        return
    big = max(rows, key=lambda r: r["MiB"])
    where = f"{big['MiB']:.0f} MiB ({big['profile']}, {big['tokens']} tokens)"
    if not big["channel"]:
        report.target("real-size pull vs LMCache channel", goal, f"{big['mbps']:.0f} MB/s at {where}", None,
                      "LMCache's transfer-channel benchmark gave no figure (see the kv_real notes)")
        return
    ratio = big["mbps"] / big["channel"]
    report.target("real-size pull vs LMCache channel", goal,
                  f"{big['mbps']:.0f} MB/s vs channel {big['channel']:.0f} MB/s ({ratio:.0%}) at {where}", ratio >= 0.5,
                  _where_the_pull_goes(big))


def _where_the_pull_goes(row: dict) -> str:
    """Which part of the pull is the limit: the NIXL READ is inside the lookup, the channel is that READ alone."""
    if "retrieve_ms" not in row:
        return ("pull = engine-side lookup (P2P lookup + NIXL READ into the reader's L1) + retrieve into paged KV "
                "over shared memory; the channel is NIXL READ alone")
    lookup_mbps = row["MiB"] * 2**20 / (row["lookup_ms"] / 1e3) / 1e6 if row["lookup_ms"] else 0.0
    retrieve_mbps = row["MiB"] * 2**20 / (row["retrieve_ms"] / 1e3) / 1e6 if row["retrieve_ms"] else 0.0
    return (f"of the {row['pull_ms']:.0f} ms pull, the lookup (P2P lookup + NIXL READ into the reader's L1) took "
            f"{row['lookup_ms']:.0f} ms ({lookup_mbps:.0f} MB/s) and the retrieve into paged KV (the engine's copy "
            f"out of the server's shared memory) {row['retrieve_ms']:.0f} ms ({retrieve_mbps:.0f} MB/s); the channel "
            "is the NIXL READ alone. Where the time went before and after the engine's own copy: bench/README.md, "
            "\"Where the real-size pull goes\"")
