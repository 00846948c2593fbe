"""`bench placement`'s runner: per repeat, two local fleets of one spec, one in the P2P mesh and one out of it
(`settings.p2p: false`), each serving document QA through vllm-router under every policy in turn (order rotated
per repeat, fresh documents per arm, so a shared box's load and the caches fall on every arm alike); each finished
arm is written at once. Before anything starts it refuses bad options, a taken port and a checkout without what the
arms run (`missing_setup`). The answer is `placement_verdict`'s.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Callable

from p2p_ops import files
from p2p_ops.bench import docqa
from p2p_ops.bench.placement_verdict import (NAN, ArmResult, PlacementOptions, aggregate, document,
                                             markdown, summarize)
from p2p_ops.endpoints import metrics_api
from p2p_ops.errors import BadInput, CouldNotRun
from p2p_ops.endpoints.metrics_api import PEER_HIT_TOKENS
from p2p_ops.harness.basic import grew
from p2p_ops.lifecycle import launch, procs
from p2p_ops.lifecycle import router as fleet_router
from p2p_ops.lifecycle.context import FleetContext
from p2p_ops.lifecycle.free_ports import PortChoice, choose, router_ports
from p2p_ops.lifecycle.render import render_fleet, write_rendered
from p2p_ops.observe import bench_plots
from p2p_ops.resources import CHECKOUT
from p2p_ops.spec.load import load_fleet
from p2p_ops.spec.starter import dump_yaml, local_fleet
from p2p_runtime.timing_profiles import TIMING_PROFILES

KV_HITS = "vllm_router_kv_placement_lookups_total"
KV_INPUTS = "vllm_router_kv_routing_inputs_total"


def missing_setup(opts: PlacementOptions, checkout: Path = CHECKOUT, bin_dir: Path = Path(sys.executable).parent
                  ) -> str:
    """The first thing the arms of `opts` would fail without, as one line naming the make target that installs
    it; "" when nothing is missing. The fleets run this interpreter's venv and the checkout's router venv."""
    needs = [(bin_dir / "lmcache", "make setup"), (bin_dir / "p2p-engine", "make setup"),
             (checkout / ".venv-router" / "bin" / "vllm-router", "make setup-router")]
    if opts.generator == "inference-perf":
        needs.append((Path(opts.inference_perf_venv) / "bin" / "inference-perf", "make setup-inference-perf"))
    return next((f"bench placement: no {path}; run `{make}` first (nothing was started)"
                 for path, make in needs if not path.is_file()), "")


def fleet_data(n: int, p2p: bool, policy: str, ports: dict[str, int], timing: str, name: str) -> dict:
    data = local_fleet(n, name=name, base=ports)
    data["settings"].update(p2p=p2p, p2p_lookup_timeout=5.0, p2p_load_timeout=5.0)
    data["engine"].update(TIMING_PROFILES[timing].engine_settings())
    data["router"] = {"enabled": True, "policy": policy, **router_ports(ports)}
    return data


def switch_policy(ctx: FleetContext, data: dict, policy: str, timeout: float = 90.0) -> None:
    """Restart only the router, under another policy (engines and caches stay); the spec file says which."""
    if ctx.fleet.router.policy == policy and fleet_router.status(ctx).ready:
        return
    procs.stop(ctx.conn(ctx.fleet.router_node()), ctx.proc("router"))
    data["router"]["policy"] = policy
    files.write_text(ctx.fleet_file, dump_yaml(data))
    ctx.fleet = load_fleet(ctx.fleet_file)
    write_rendered([f for f in render_fleet(ctx.fleet, ctx.node_layout) if f.unit == "router"], ctx.layout)
    procs.start(ctx.conn(ctx.fleet.router_node()), ctx.proc("router"))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if fleet_router.status(ctx).ready:
            return
        time.sleep(0.5)
    raise CouldNotRun(f"router under {policy} not ready after {timeout:.0f} s; log: {ctx.proc('router').log}")


def _scrape(ctx: FleetContext) -> tuple[list, list]:
    """Every server's metrics, and the router's."""
    router = f"http://{ctx.fleet.router_node().address}:{ctx.fleet.router.prometheus_port}"
    return [metrics_api.scrape(ctx.server_url(n, i)) for n, i in ctx.fleet.instances()], metrics_api.scrape(router)


def run(out_dir: Path, opts: PlacementOptions, progress: Callable[[str], None] = lambda _: None) -> list[ArmResult]:
    opts.validate()
    # Both arms run one after the other on the same ports (the first is down before the second starts).
    choice = choose(opts.nodes, opts.port_offset, router=True)
    if why := missing_setup(opts):
        raise BadInput(why)
    progress(choice.line())
    files.make_dirs(out_dir)
    deadline = time.monotonic() + (opts.max_seconds or opts.repeat_s * opts.repeats)
    results: list[ArmResult] = []
    turns_out: list[dict] = []
    for r in range(1, opts.repeats + 1):
        k = (r - 1) % len(opts.policies)
        order = opts.policies[k:] + opts.policies[:k]
        for p2p in opts.p2p_arms:
            tag = "on" if p2p else "off"
            arm = f"P2P {tag}, repeat {r}/{opts.repeats}"
            if time.monotonic() > deadline:
                progress(f"time bound reached: skipping {arm}")
                continue
            data = fleet_data(opts.nodes, p2p, order[0], choice.base, opts.timing, f"placement-p2p-{tag}")
            progress(f"{arm}: starting {opts.nodes} nodes + router")
            try:
                with launch.temporary(data, out_dir / f"fleet-p2p-{tag}-r{r}", progress=progress,
                                      wait_timeout=120) as ctx:
                    for policy in order:
                        if time.monotonic() > deadline:
                            progress(f"time bound reached: skipping {policy} ({arm})")
                            continue
                        results.append(_run_arm(ctx, data, policy, p2p, r, opts, turns_out, progress, out_dir))
                        _write(out_dir, results, turns_out, opts, choice)
            except Exception as exc:  # noqa: BLE001 - finished arms stay; the failure is recorded
                progress(f"{arm}: {type(exc).__name__}: {exc}")
                results.append(ArmResult("(fleet)", p2p, 0, 0, 0, 0, NAN, NAN, 0, 0, 0, 0,
                                         error=f"{type(exc).__name__}: {exc}"[:500], repeat=r))
                _write(out_dir, results, turns_out, opts, choice)
    return results


def _run_arm(ctx: FleetContext, data: dict, policy: str, p2p: bool, repeat: int, opts: PlacementOptions,
             turns_out: list, progress: Callable[[str], None], out_dir: Path) -> ArmResult:
    label = f"{policy}-p2p-{'on' if p2p else 'off'}"
    switch_policy(ctx, data, policy)
    progress(f"{label} (repeat {repeat}): {opts.workload.sessions} sessions x {opts.workload.questions} questions")
    before, rbefore = _scrape(ctx)
    # The repeat in the documents' label: each repeat's documents are its own.
    if opts.generator == "inference-perf":
        turns, wall = docqa.run_inference_perf(ctx.fleet.router_url, ctx.fleet.model, opts.workload,
                                               f"{label}-r{repeat}", out_dir / "inference-perf" / f"{label}-r{repeat}",
                                               Path(opts.tokenizer), Path(opts.inference_perf_venv))
    else:
        turns, wall = docqa.run(ctx.fleet.router_url, ctx.fleet.model, opts.workload, f"{label}-r{repeat}", progress)
    after, rafter = _scrape(ctx)
    peer = sum(grew(b, a, PEER_HIT_TOKENS) for a, b in zip(after, before))
    hits, inputs = grew(rbefore, rafter, KV_HITS, result="hit"), grew(rbefore, rafter, KV_INPUTS)
    turns_out += [{"arm": label, "repeat": repeat, **asdict(t)} for t in turns]
    res = replace(summarize(policy, p2p, turns, wall, peer, hits, inputs), repeat=repeat)
    progress(f"{label}: {res.req_per_s:.2f} req/s, TTFT p50 {res.ttft_p50_ms:.0f} ms, "
             f"peer tokens {res.peer_tokens}, failed {res.failed}")
    return res


def _write(out_dir: Path, results: list[ArmResult], turns: list[dict], opts: PlacementOptions,
           ports: PortChoice) -> None:
    files.write_json(out_dir / "results.json", document(results, opts, ports, turns))
    files.write_text(out_dir / "turns.json", json.dumps(turns))
    files.write_text(out_dir / "summary.md", markdown(results, opts, turns))
    bench_plots.placement(out_dir, aggregate(results))

