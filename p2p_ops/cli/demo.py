"""`make demo` (`python -m p2p_ops.cli.demo`): a whole P2P fleet on this machine, the cross-node proof and an
honest speed figure.

`run_demo` first makes one throw-away pull on B: the first pull of a fresh fleet pays NIXL's connection set-up,
which is not what P2P costs once running. Then the proof (`p2pctl test basic`), then like with like: TTFT on B
for a prompt pulled from A against a fresh prompt of the same length B must recompute, median of 3 each. The fleet
(`launch.temporary`: spec and state kept in p2p-run/<name>/) is taken down also on failure. Ports: the default
plan at the first offset (0, 1000, 2000, ...) where every port is free, so the demo runs beside another fleet.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from p2p_ops.cli.common import add_port_offset_arg
from p2p_ops.cli.output import console, err_console, heading, progress, show, table
from p2p_ops.cli.test_cmds import print_basic
from p2p_ops.errors import P2POpsError
from p2p_ops.harness.basic import BasicResult, run_basic
from p2p_ops.harness.crossover import CrossoverRow, measure
from p2p_ops.lifecycle import launch
from p2p_ops.lifecycle.free_ports import choose
from p2p_ops.observe.stats import fmt
from p2p_ops.resources import env_path
from p2p_ops.spec.starter import DEFAULT_VLLM_VENV, local_fleet
from p2p_runtime.profiles import PROFILE_NAMES, TINY

REPEATS = 3


def embedded_fleet(base: dict[str, int], profile: str = TINY) -> dict:
    """Two embedded nodes; a real profile's KV (e.g. llama-3-8b, 128 KiB per token) is sized as `init --profile`."""
    return local_fleet(2, name="demo" if profile == TINY else f"demo-{profile}", base=base, profile=profile)


def vllm_fleet(base: dict[str, int], model_dir: str = "models/tiny-llama") -> dict:
    """Two vLLM CPU nodes (the vLLM runtime's fleet spec: `vllm:` section, model made locally if missing)."""
    from p2p_ops.harness.local_model import is_model_dir, make_model

    model = Path(model_dir).resolve()
    if not is_model_dir(model):
        make_model(model)
    venv = env_path("P2P_VLLM_VENV", DEFAULT_VLLM_VENV)
    data = local_fleet(2, name="demo-vllm", base=base, runtime="vllm",
                       vllm={"model_path": str(model), "venv": str(venv)}, cpu_count=os.cpu_count() or 1)
    # A dead peer must not hold a request for the default 30 s.
    data["settings"].update(p2p_lookup_timeout=5.0, p2p_load_timeout=5.0)
    return data


def run_demo(fleet_data: dict, title: str, wait_timeout: float = 60.0, start_timeout: float = 120.0) -> int:
    started = time.monotonic()
    where = Path("p2p-run") / fleet_data.get("name", "demo")
    heading(title)
    console.print(f"fleet spec {where / 'fleet.yaml'}, state in {where.resolve()}", soft_wrap=True)
    timings: dict[str, float] = {}
    result, row = None, None
    try:
        with err_console.status("starting coordinator, lmcache servers and engines ...") as status:
            def note(msg: str) -> None:
                status.update(msg)
                progress(msg)

            with launch.temporary(fleet_data, where, timings, note, wait_timeout, start_timeout) as ctx:
                t = time.monotonic()
                status.update("warming the pair (one throw-away pull on B) ...")
                measure(ctx, [512], repeats=1, progress=note)
                status.update("cross-node proof ...")
                result = run_basic(ctx, progress=note)
                status.update(f"pull versus recompute on B, median of {REPEATS} ...")
                [row] = measure(ctx, [int(result.numbers["prompt_tokens"])], repeats=REPEATS, progress=note)
                timings["proof and figures"] = time.monotonic() - t
                status.update("stopping the fleet ...")
        print_basic(result)
    except (P2POpsError, RuntimeError) as exc:
        console.print(f"[red]demo failed:[/red] {exc}")
    if result is None:
        return 1
    names = {"up_s": "up", "wait_s": "registered", "proof and figures": "proof and figures"}
    _summary(result, row, {names[k]: v for k, v in timings.items()}, time.monotonic() - started)
    return 0 if result.passed else 1


def _summary(result: BasicResult, row: CrossoverRow | None, stamps: dict[str, float], total: float) -> None:
    n = result.numbers
    t = table(f"demo summary: TTFT on node B, median of {REPEATS}, after one warm-up pull", "prompt tokens",
              "pulled from A", "recomputed on B", "speed-up", "cached tokens on B", "KV bytes pulled", "P2P loads",
              "result")
    pulled = fmt(row and row.ttft_pulled_b_s, "{:.0f} ms", 1000)
    recompute = fmt(row and row.ttft_recompute_b_s, "{:.0f} ms", 1000)
    speed = f"{row.speedup:.1f}x" if row and row.ttft_pulled_b_s else "-"
    t.add_row(str(n["prompt_tokens"]), pulled, recompute, speed, f"{n['cached_tokens_b']} / {n['prompt_tokens']}",
              f"{n['kv_bytes_pulled_b'] / 2**20:.2f} MiB", f"{n['p2p_loads_b']:g}",
              "[green]PASS[/green]" if result.passed else "[red]FAIL[/red]")
    show(t)
    timing = ", ".join(f"{k} {v:.0f} s" for k, v in stamps.items())
    console.print(f"{'PASS' if result.passed else 'FAIL'} in {total:.0f} s ({timing}); evidence: {result.run_dir}",
                  soft_wrap=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m p2p_ops.cli.demo", description=__doc__.splitlines()[0],
                                 epilog="exit codes: 0 the proof passed, 1 it failed or the fleet did not come up, "
                                        "2 bad input")
    ap.add_argument("--runtime", choices=["embedded", "vllm"], default="embedded")
    add_port_offset_arg(ap)
    ap.add_argument("--profile", choices=PROFILE_NAMES, default=TINY,
                    help="embedded runtime: the model whose KV bytes the engines store and pull (default tiny)")
    args = ap.parse_args(argv)
    if args.runtime == "vllm" and args.profile != TINY:
        ap.error("--profile is for the embedded runtime; vLLM's KV is its model's")
    try:
        ports = choose(2, args.port_offset)
    except P2POpsError as exc:
        print(f"demo: {exc}", file=sys.stderr)
        return exc.exit_code
    progress(ports.line())
    if args.runtime == "vllm":
        # vLLM needs 25-90 s to become healthy on an idle 2-core box.
        return run_demo(vllm_fleet(ports.base), "LMCache P2P demo: 2 nodes, real lmcache servers, vLLM (CPU build)",
                        wait_timeout=120.0, start_timeout=600.0)
    what = "" if args.profile == TINY else f" storing {args.profile}'s KV"
    return run_demo(embedded_fleet(ports.base, args.profile),
                    f"LMCache P2P demo: 2 nodes, real lmcache servers, CPU engines{what}")


if __name__ == "__main__":
    sys.exit(main())
