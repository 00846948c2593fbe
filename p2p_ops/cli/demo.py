"""`make demo` (`python -m p2p_ops.cli.demo`): a whole P2P fleet on this machine, the cross-node proof and an
honest speed figure.

`run_demo(fleet_data, title)` writes the spec to p2p-run/<name>.yaml, brings the fleet up, waits until every
server is registered, then:
  1. warms the pair: one throw-away pull on B of another prompt (the first pull of a fresh fleet pays NIXL's
     connection set-up, which is not what P2P costs once running);
  2. runs the cross-node proof (`p2pctl test basic`: cold on A, served from A's cache on B, identical outputs);
  3. measures like with like: TTFT on B for a prompt pulled from A against TTFT on B for a fresh prompt of
     the same length that B must recompute, median of 3 each.
It prints a summary and takes the fleet down, also on failure. `make demo` runs it with a 2-node embedded
fleet (`--profile llama-3-8b`: the engines store and pull that model's KV bytes); `--runtime vllm` (`make demo-vllm`) with two vLLMs (CPU build, venv from $P2P_VLLM_VENV or
./.venv-vllm, a tiny model made under ./models/ when missing); other callers pass their own fleet data.

Ports: the default plan (coordinator 9300, ...) at the first offset (0, 1000, 2000, ...) where every port is
free, so the demo runs beside another fleet; `--port-offset K` takes exactly that offset. The first line on
stderr says which.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Optional

import yaml
from rich.table import Table

from p2p_ops import files
from p2p_ops.cli.output import console, err_console, heading, progress, show
from p2p_ops.cli.test_cmds import print_basic
from p2p_ops.errors import P2POpsError
from p2p_ops.harness.basic import BasicResult, run_basic
from p2p_ops.harness.crossover import CrossoverRow, measure
from p2p_ops.lifecycle import launch
from p2p_ops.lifecycle.context import FleetContext
from p2p_ops.lifecycle.free_ports import choose
from p2p_ops.spec.starter import local_fleet
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
    venv = Path(os.environ.get("P2P_VLLM_VENV", ".venv-vllm")).resolve()
    data = local_fleet(2, name="demo-vllm", base=base, runtime="vllm",
                       vllm={"model_path": str(model), "venv": str(venv)}, cpu_count=os.cpu_count() or 1)
    # A dead peer must not hold a request for the default 30 s.
    data["settings"].update(p2p_lookup_timeout=5.0, p2p_load_timeout=5.0)
    return data


def run_demo(fleet_data: dict, title: str, root: str = "p2p-run", wait_timeout: float = 60.0,
             start_timeout: float = 120.0) -> int:
    """Up, warm, prove, measure, down. Returns 0 when the proof passed."""
    started = time.monotonic()
    name = fleet_data.get("name", "demo")
    fleet_file = Path(root) / f"{name}.yaml"
    files.write_text(files.private_dir(fleet_file.parent) / fleet_file.name, yaml.safe_dump(fleet_data, sort_keys=False))
    with FleetContext.load(fleet_file, run_dir=str(Path(root) / name)) as ctx:
        heading(title)
        console.print(f"fleet spec {fleet_file}, state in {ctx.layout.root}", soft_wrap=True)
        result, row, stamps = _up_prove_measure(ctx, wait_timeout, start_timeout)
    if result is None:
        return 1
    _summary(result, row, stamps, time.monotonic() - started)
    return 0 if result.passed else 1


def _up_prove_measure(ctx: FleetContext, wait_timeout: float, start_timeout: float
                      ) -> tuple[Optional[BasicResult], Optional[CrossoverRow], dict[str, float]]:
    """Up, wait, warm, prove, measure; the fleet goes down whatever happens. (None, ...) when it failed."""
    stamps: dict[str, float] = {}
    result, row = None, None
    try:
        with err_console.status("starting coordinator, lmcache servers and engines ...") as status:
            def progress(msg: str) -> None:
                status.update(msg)
                err_console.print(f"[dim]·[/dim] {msg}", soft_wrap=True)

            t = time.monotonic()
            launch.up(ctx, progress=progress, start_timeout=start_timeout)
            stamps["up"] = time.monotonic() - t
            t = time.monotonic()
            status.update("waiting for registration ...")
            launch.wait(ctx, timeout=wait_timeout, progress=progress)
            stamps["registered"] = time.monotonic() - t
            t = time.monotonic()
            status.update("warming the pair (one throw-away pull on B) ...")
            measure(ctx, [512], repeats=1, progress=progress)
            status.update("cross-node proof ...")
            result = run_basic(ctx, progress=progress)
            status.update(f"pull versus recompute on B, median of {REPEATS} ...")
            length = int(result.numbers["prompt_tokens"])
            [row] = measure(ctx, [length], repeats=REPEATS, progress=progress)
            stamps["proof and figures"] = time.monotonic() - t
        print_basic(result)
    except (P2POpsError, RuntimeError) as exc:
        console.print(f"[red]demo failed:[/red] {exc}")
    finally:
        with err_console.status("stopping the fleet ..."):
            launch.down(ctx)
    return result, row, stamps


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def _summary(result: BasicResult, row: CrossoverRow | None, stamps: dict[str, float], total: float) -> None:
    n = result.numbers
    table = Table(title=f"demo summary: TTFT on node B, median of {REPEATS}, after one warm-up pull")
    for col in ("prompt tokens", "pulled from A", "recomputed on B", "speed-up", "cached tokens on B",
                "KV bytes pulled", "P2P loads", "result"):
        table.add_column(col)
    pulled = _ms(row.ttft_pulled_b_s) if row else "-"
    recompute = _ms(row.ttft_recompute_b_s) if row else "-"
    speed = f"{row.speedup:.1f}x" if row and row.ttft_pulled_b_s else "-"
    table.add_row(str(n["prompt_tokens"]), pulled, recompute, speed, f"{n['cached_tokens_b']} / {n['prompt_tokens']}",
                  f"{n['kv_bytes_pulled_b'] / 2**20:.2f} MiB", f"{n['p2p_loads_b']:g}",
                  "[green]PASS[/green]" if result.passed else "[red]FAIL[/red]")
    show(table)
    timing = ", ".join(f"{k} {v:.0f} s" for k, v in stamps.items())
    console.print(f"{'PASS' if result.passed else 'FAIL'} in {total:.0f} s ({timing}); evidence: {result.run_dir}",
                  soft_wrap=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m p2p_ops.cli.demo", description=__doc__.splitlines()[0],
                                 epilog="exit codes: 0 the proof passed, 1 it failed or the fleet did not come up, 2 bad input")
    ap.add_argument("--runtime", choices=["embedded", "vllm"], default="embedded")
    ap.add_argument("--port-offset", type=int, default=None, metavar="K",
                    help="the default ports + K (default: the first offset 0, 1000, ... where all are free)")
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
