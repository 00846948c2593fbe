"""`p2pctl bench transfer`: can this fabric move the fleet's KV fast enough? LMCache's channel sweep beside memcpy.

Between two nodes of a fleet (the reader pulls from the source, as a P2P hit does), on the fleet's own transport
settings (UCX_TLS, UCX_NET_DEVICES or the NIC plan's pick, l1_align_bytes as the page size), for the sizes the
fleet's profile implies (`spec.transfer_sizes`: one chunk up to the prefix of `prompt_tokens`), with --verify.
Each row also carries memcpy of the same bytes on the reader (the ceiling a copy into L1 has there) and the rails
that moved its bytes (`transfer_rails`). The verdict compares the whole prefix's read time with the fleet's need:
`need_ms` (default: recomputing that prefix, `spec.transfer_sizes.need_ms`; pass your own from `p2pctl calibrate`).
The sweep runs `repeats` times, its sizes interleaved (1, 2, 4, 1, 2, 4, ...) so the box's load falls on every size
alike (`per_size`: medians with their min-max; `verdict`: 'inconclusive on this box' where they straddle the need).
"""

from __future__ import annotations

import shlex
from dataclasses import replace
from pathlib import Path
from typing import Callable, Optional, Sequence

from p2p_ops import files
from p2p_ops.bench import channel, transfer_patterns, transfer_rails
from p2p_ops.lifecycle.context import FleetContext
from p2p_ops.facts.netdev import IPV4_INTERFACES
from p2p_ops.facts.sections import read_fact
from p2p_ops.lifecycle.free_ports import free_port
from p2p_ops.lifecycle.nic_plan import read_plans
from p2p_ops.lifecycle.render import bin_dir_for
from p2p_ops.observe import bench_plots
from p2p_ops.observe.stats import median, span, straddles, with_spread
from p2p_ops.spec.load import require_mooncake_opt_in
from p2p_ops.spec.model import Node
from p2p_ops.spec.transfer_sizes import fleet_size_plan, need_ms as fleet_need_ms

# memcpy of `n` bytes with Python's buffer copy (a plain memcpy), best of 5, as GB/s.
_MEMCPY = ("import sys, time\nn = int(sys.argv[1]); src = bytearray(n); dst = bytearray(n); best = 1e9\n"
           "for _ in range(5):\n    t = time.perf_counter(); dst[:] = src; best = min(best, time.perf_counter() - t)\n"
           "print(n / best / 1e9)\n")


def net_devices(ctx: FleetContext, node: Node) -> str:
    """UCX_NET_DEVICES as the node's first server gets it from env.sh: the spec's pin, lo on a loopback fleet,
    the NIC plan's RDMA ports, else (an SSH node) the interface that holds the node's address."""
    s = ctx.fleet.effective_settings(node.instances[0])
    if s.ucx_net_devices or ctx.fleet.all_loopback:
        return s.ucx_net_devices or "lo"
    plan = read_plans(ctx.conn(node), ctx.fleet, node).get(node.instances[0].id)
    if plan and plan.devices:
        return plan.net_devices
    return read_fact(ctx.conn(node), IPV4_INTERFACES).get(node.bind_host, "") if node.connection == "ssh" else ""


def side(ctx: FleetContext, node: Node) -> channel.Side:
    s = ctx.fleet.effective_settings(node.instances[0])
    return channel.Side(ctx.conn(node), node.bind_host, f"{bin_dir_for(node)}/python",
                        str(ctx.node_layout(node).root / "bench-transfer"),
                        channel.transport_env(s.ucx_tls, net_devices(ctx, node)))


def memcpy_gbps(s: channel.Side, nbytes: int) -> Optional[float]:
    res = s.conn.run(f"{shlex.quote(s.python)} -c {shlex.quote(_MEMCPY)} {int(nbytes)}", timeout=120)
    try:
        return round(float(res.stdout.strip().splitlines()[-1]), 2)
    except (ValueError, IndexError):
        return None


def per_size(runs: list[dict]) -> list[dict]:
    """One row per size over the repeated sweeps (rows in run order): GB/s, p50 and p99 the median over the
    repeats whose read succeeded, `gbps_range` and `p50_range` their min-max, ok only when every repeat was;
    every repeat's own row under `runs`."""
    out = []
    for count in dict.fromkeys(r["num_objects"] for r in runs):
        mine = [r for r in runs if r["num_objects"] == count]
        good = [r for r in mine if r["ok"]]
        row = {**mine[0], "runs": mine, "ok": len(good) == len(mine),
               "error": next((r["error"] for r in mine if not r["ok"]), ""),
               "note": next((r["note"] for r in mine if r.get("note")), ""),
               "gbps_range": span(r.get("median_gbps") for r in good), "p50_range": span(r.get("p50_ms") for r in good)}
        row.update({f: median(r.get(f) for r in good) for f in ("median_gbps", "p50_ms", "p99_ms")})
        if "overlapped" in row:
            row["overlapped"] = all(r["overlapped"] for r in mine)
        out.append(row)
    return out


def verdict(rows: list[dict], need_ms: float, what: str = "the prefix") -> tuple[bool, str]:
    """Pure: every read verified, and the whole prefix (the last row) read within need_ms (its median p50 over
    the repeats; 'inconclusive on this box' when their p50s straddle need_ms, `observe.stats.straddles`)."""
    if not rows or not all(r["ok"] for r in rows):
        bad = next((r for r in rows if not r["ok"]), None)
        return False, f"FAIL: a read failed ({bad['error'] if bad else 'no rows'})"
    last = rows[-1]
    took, mib, spread = last["p50_ms"], last["payload_bytes"] / 2**20, last.get("p50_range")
    shown = with_spread(took, spread, "{:.1f}") if took is not None else "n/a"
    tail = (f"; inconclusive on this box: its {len(last.get('runs', []))} sweeps read it in {spread[0]:.1f}-"
            f"{spread[1]:.1f} ms, on both sides of {need_ms:g} ms; more --repeats or an idle box would decide it"
            if straddles(spread, need_ms) else "")
    if took is None or took > need_ms:
        return False, (f"SLOW: {what} ({mib:.1f} MiB) reads in {shown} ms (p50), more than the {need_ms:g} ms "
                       f"the fleet needs; check the NIC plan (`p2pctl probe`) and `p2pctl rails`{tail}")
    return True, f"OK: {what} ({mib:.1f} MiB) reads in {shown} ms (p50), within {need_ms:g} ms{tail}"


def run_transfer(ctx: FleetContext, source: str, reader: str, prompt_tokens: int, iters: int = 5,
                 need_ms: Optional[float] = None, progress: Callable[[str], None] = lambda _: None,
                 engines: Sequence[str] = (), repeats: int = 1) -> dict:
    """One sweep per transfer engine (default: the fleet's, nixl for `tcp`), rows tagged with it."""
    s = ctx.fleet.settings
    engines = engines or ("mooncake_te" if s.transfer_engine == "mooncake_te" else "nixl",)
    src, dst = ctx.fleet.named_node("--source", source), ctx.fleet.named_node("--reader", reader)
    if "mooncake_te" in engines:
        require_mooncake_opt_in(ctx.fleet, "--engine mooncake_te")
    plan = fleet_size_plan(ctx.fleet, prompt_tokens)
    need, need_why = (need_ms, "--need-ms") if need_ms else fleet_need_ms(ctx.fleet, plan)
    # Mooncake's protocol and device as the fleet's env.sh hands them (the NIC plan's HCAs aside).
    mc = {"MC_TE_PROTOCOL": s.mooncake_protocol, **({"MC_TE_DEVICE": s.mooncake_device} if s.mooncake_device else {})}
    server, client = side(ctx, src), side(ctx, dst)
    memcpy: dict[int, Optional[float]] = {}
    rows = []
    for engine in engines:
        if engine == "mooncake_te":
            server, client = (replace(x, env={**x.env, **mc}) for x in (server, client))
        rows += [{**r, "engine": engine} for r in per_size(_sweep(
            server, client, source, reader, plan, channel.Options(plan.chunk_bytes, list(plan.counts) * repeats,
                                                                   s.l1_align_bytes, iters=iters, channel_type=engine),
            memcpy, progress))]
    ok, line = verdict(rows, need)
    sides = {"source": [(source, server.conn)], "reader": [(reader, client.conn)]}
    shm = transfer_rails.one_host(sides) and not any(r["rails"] for r in rows)
    return {"rails_note": transfer_rails.ONE_HOST_NOTE if shm else "", "pattern": "pairwise", "source": source,
            "reader": reader, "sizes": plan.to_dict(), "env": dict(client.env), "source_env": dict(server.env),
            "rows": rows, "ok": ok, "verdict": line, "need_ms": need, "need_why": need_why, "engines": list(engines),
            "repeats": repeats}


def _sweep(server: channel.Side, client: channel.Side, source: str, reader: str, plan, opts: channel.Options,
           memcpy: dict[int, Optional[float]], progress: Callable[[str], None]) -> list[dict]:
    # Free here; on a remote node a port the kernel hands out here is very rarely taken there (the server's
    # bind would then fail with its log shown).
    ports = channel.Ports(free_port(), free_port(), free_port())
    progress(f"transfer sweep {source} -> {reader} on {opts.channel_type}: {len(plan.counts)} sizes x "
             f"{len(opts.counts) // len(plan.counts)} repeats, "
             f"{plan.chunk_bytes} B chunks, UCX_NET_DEVICES {server.env.get('UCX_NET_DEVICES', '(unset)')} -> "
             f"{client.env.get('UCX_NET_DEVICES', '(unset)')}, ports {ports.transfer}/{ports.control}/{ports.listen}")
    sides = {"source": [(source, server.conn)], "reader": [(reader, client.conn)]}
    rails: dict[int, list[dict]] = {}

    def around(count: int, run: Callable[[], channel.ChannelRun]) -> channel.ChannelRun:
        rails[count], result = transfer_rails.measure(sides, (opts.warmup + opts.iters) * count * plan.chunk_bytes, run)
        progress(f"  {count} chunk(s): {result.median_gbps or 0:.2f} GB/s, {'ok' if result.ok else result.error}")
        return result

    return [_with_memcpy({**run.to_dict(), "rails": rails.get(run.num_objects, [])}, client, memcpy)
            for run in channel.run_channel(server, client, opts, ports, around)]


def _with_memcpy(row: dict, s: channel.Side, measured: dict[int, Optional[float]]) -> dict:
    """`row` with memcpy of its bytes on `s`, measured once per size."""
    if row["payload_bytes"] not in measured:
        measured[row["payload_bytes"]] = memcpy_gbps(s, row["payload_bytes"])
    return {**row, "memcpy_gbps": measured[row["payload_bytes"]]}


def run_fan(ctx: FleetContext, pattern: str, hub: str, prompt_tokens: int, iters: int = 5,
            need_ms: Optional[float] = None, progress: Callable[[str], None] = lambda _: None,
            repeats: int = 1) -> dict:
    """many-to-one (every other node serves, the hub reads) or one-to-many (the hub serves, the others read),
    one concurrent round per size (p2p_ops.bench.transfer_patterns); rails read on every node around each round."""
    ctx.fleet.named_node("--reader" if pattern == "many-to-one" else "--source", hub)
    others = [n.name for n in ctx.fleet.nodes if n.name != hub]
    plan = fleet_size_plan(ctx.fleet, prompt_tokens)
    need, need_why = (need_ms, "--need-ms") if need_ms else fleet_need_ms(ctx.fleet, plan)
    sides = {n.name: side(ctx, n) for n in ctx.fleet.nodes}
    links = transfer_patterns.plan_links(pattern, hub, others, sides, free_port)
    opts = channel.Options(plan.chunk_bytes, list(plan.counts) * repeats, ctx.fleet.settings.l1_align_bytes,
                           iters=iters)
    roles = {"source": [(k.source, k.server.conn) for k in links], "reader": [(k.reader, k.client.conn) for k in links]}
    progress(f"transfer {pattern} around {hub} ({len(links)} links): {len(plan.counts)} sizes x {repeats} repeats, "
             f"{plan.chunk_bytes} B chunks, a common start {transfer_patterns.START_LEAD_S:g} s after each launch")
    rails: dict[int, list[dict]] = {}

    def around(count: int, run: Callable[[], list]) -> list:
        rails[count], result = transfer_rails.measure(roles, (opts.warmup + opts.iters) * count * plan.chunk_bytes, run)
        progress(f"  {count} chunk(s) x {len(links)}: " + ", ".join(
            f"{r.median_gbps or 0:.2f}" if r.ok else r.error[:40] for r in result) + " GB/s")
        return result

    memcpy: dict[int, Optional[float]] = {}
    rows = per_size([_with_memcpy({**transfer_patterns.aggregate(runs), "rails": rails.get(runs[0].num_objects, [])},
                                  sides[hub], memcpy)
                     for runs in transfer_patterns.run_links(links, opts, around=around)])
    ok, line = verdict(rows, need, f"{len(links)} prefixes at once")
    ends = (",".join(others), hub) if pattern == "many-to-one" else (hub, ",".join(others))
    return {"pattern": pattern, "source": ends[0], "reader": ends[1], "sizes": plan.to_dict(),
            "env": dict(sides[hub].env), "rows": rows, "ok": ok, "verdict": line, "need_ms": need,
            "need_why": need_why, "repeats": repeats}


def write_run(out_dir: Path, doc: dict) -> dict:
    files.make_dirs(out_dir)
    named = {**doc, "run_dir": str(out_dir), "json": str(out_dir / "transfer.json"),
             "plot": str(out_dir / "transfer.png") if doc["rows"] else None}
    if doc["rows"]:
        bench_plots.transfer(out_dir / "transfer.png", doc)
    files.write_json(out_dir / "transfer.json", named)
    return named
