"""`p2pctl probe [--json] [--bootstrap] [--node NAME]`: is every node ready for its part of the fleet?

Exit codes: 0 every node ready (warnings allowed), 1 a node has problems, 2 a node could not be probed
(unreachable, authentication, host key) or bad input.
"""

from __future__ import annotations

import argparse

from p2p_ops.cli.common import context, done, verb
from p2p_ops.cli.output import console, progress, show, table
from p2p_ops.facts.python_env import FAMILIES
from p2p_ops.lifecycle import launch
from p2p_ops.lifecycle.context import FleetContext
from p2p_ops.lifecycle.preflight.bootstrap import bootstrap_node, needs_bootstrap, needs_mooncake
from p2p_ops.lifecycle.preflight.probe import NodeProbe, fleet_exit_code, fleet_ok, probe_fleet


def register(sub: argparse._SubParsersAction) -> None:
    p = verb(sub, "probe", cmd_probe, json="machine-readable output",
             help="check each node: GPUs, RDMA, versions, free ports, model cache, disk, memlock")
    p.add_argument("--node", default=None, help="only this node")
    p.add_argument("--bootstrap", action="store_true",
                   help="create the virtualenv (fleet.yaml `venv`) on nodes that lack it, from this checkout "
                        "(python3 -m venv + the Makefile's pip steps; the node must see this path), add the "
                        "node's Mooncake build where transfer_engine is mooncake_te and it does not import, then "
                        "probe again")


def cmd_probe(args: argparse.Namespace) -> int:
    with context(args) as ctx:
        launch.check_node(ctx, args.node)
        probes = probe_fleet(ctx, args.node)
        boot: dict[str, str] = {}
        if args.bootstrap:
            boot = _bootstrap(ctx, probes)
            if boot:
                probes = probe_fleet(ctx, args.node)
    doc = {"fleet": ctx.fleet.name, "ok": fleet_ok(probes), "nodes": {name: p.to_json() for name, p in probes.items()}}

    def show_nodes() -> None:
        for p in probes.values():
            _print_node(p)
        for name, what in boot.items():
            console.print(f"bootstrap {name}: {what}")

    return done(args, doc | ({"bootstrap": boot} if args.bootstrap else {}), show_nodes, fleet_exit_code(probes))


def _bootstrap(ctx: FleetContext, probes: dict[str, NodeProbe]) -> dict[str, str]:
    todo = {n.name: n for n in ctx.fleet.nodes if n.name in probes and (
        needs_bootstrap(probes[n.name]) or needs_mooncake(ctx.fleet, probes[n.name]))}
    for n in todo.values():
        progress(f"bootstrapping {n.venv} on {n.name} (python3 -m venv and/or Mooncake + pip; this takes minutes)")
    results = ctx.for_each_node(lambda n: bootstrap_node(ctx, n, probes[n.name]) if n.name in todo else None)
    return {name: f"error: {res}" if isinstance(res, Exception) else str(res)
            for name, res in results.items() if name in todo}


def _fmt_bytes(n: int | None) -> str:
    return "unlimited" if n is None else f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n // 1024} KiB"


def node_rows(p: NodeProbe) -> list[tuple[str, str]]:
    """(check, value) rows of one node's table."""
    rows = [("host", f"{p.host.get('hostname', '')} (kernel {p.host.get('kernel', '')})")]
    py = p.python
    if py is not None and py.present:
        rows.append(("python", f"{py.version} {py.executable}"))
        rows.append(("lmcache / nixl / vllm", " / ".join(py.version_of(k) or "-" for k in ("lmcache", "nixl", "vllm"))))
        build = next((f"{d} {py.packages[d]}" for d in FAMILIES["mooncake"] if py.packages.get(d)), "")
        rows.append(("mooncake", f"{build} ({'imports' if py.mooncake == 'ok' else py.mooncake})" if build else "-"))
    else:
        rows.append(("python", py.error if py else "-"))
    gpus = p.gpus
    rows.append(("GPUs", "no nvidia-smi" if gpus is None else
                 ", ".join(f"{g.index}: {g.name} ({g.memory_total_mib} MiB)" for g in gpus) or "none"))
    rows.append(("RDMA", ", ".join(
        f"{d.name} (NUMA {d.numa_node if d.numa_node is not None else '?'}; "
        + ", ".join(f"port {pt.port} {pt.state} {pt.link_layer} {pt.rate}".strip() for pt in d.ports)
        + (f"; {','.join(d.netdevs)}" if d.netdevs else "") + ")" for d in p.rdma) or "none"))
    for plan in p.nic_plan:
        rows.append((f"NIC plan {plan.instance}", (f"UCX_NET_DEVICES={plan.net_devices} UCX_MAX_RMA_RAILS="
                                                  f"{plan.max_rma_rails}; " if plan.devices else "") + plan.why))
    free = [pc for pc in p.ports if pc.state == "free"]
    other = [f"{pc.port} {pc.role}: {pc.state} ({pc.holder})" for pc in p.ports if pc.state != "free"]
    rows.append(("ports", f"{len(free)}/{len(p.ports)} free" + ("; " + "; ".join(other) if other else "")))
    if p.model_cache is not None:
        rows.append(("model cache", ("present " if p.model_cache.present else "absent ") + p.model_cache.path))
    if p.disk is not None:
        rows.append(("free disk", f"{_fmt_bytes(p.disk.avail_bytes)} on {p.disk.mount} (run dir {p.disk_path})"))
    if p.memlock is not None:
        rows.append(("memlock", p.memlock.error or
                     f"soft {_fmt_bytes(p.memlock.soft)}, hard {_fmt_bytes(p.memlock.hard)}"))
    return rows


def _print_node(p: NodeProbe) -> None:
    colour = "green" if p.ok else "red"
    verdict = f"[{colour}]{p.verdict.upper()}[/{colour}]"
    t = table(f"node {p.node} ({p.connection} {p.address}) — {verdict}", "check", title_justify="left")
    t.add_column("value", overflow="fold")
    rows = [("error", p.error)] if p.error else [
        *node_rows(p), *((f"[red]problem[/red] ({v.id})", v.line()) for v in p.problems),
        *((f"[yellow]warning[/yellow] ({v.id})", v.line()) for v in p.warnings)]
    for check, value in rows:
        t.add_row(check, value)
    show(t)
