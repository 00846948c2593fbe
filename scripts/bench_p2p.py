#!/usr/bin/env python3
"""Benchmark: fleet launch times and P2P pull versus recompute on node B, per prompt length.

usage: scripts/bench_p2p.py [-f fleet.yaml | --launch] [--lengths 256,1024,2048,4096] [--repeats 3]

With --launch it brings up a temporary 2-node local fleet on free ports (and takes it down afterwards),
timing `up` and `wait`. Prints a table and the pull/recompute ratio per length; this is a benchmark, not a
test: it asserts nothing and exits 0 unless something could not run.
"""

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1], usage=__doc__.splitlines()[3].strip())
    ap.add_argument("-f", "--fleet", default="fleet.yaml")
    ap.add_argument("--launch", action="store_true", help="start a temporary local fleet for the benchmark")
    ap.add_argument("--lengths", default="256,1024,2048,4096")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    from p2p_ops import launch
    from p2p_ops.harness.crossover import measure

    console = Console()
    lengths = [int(x) for x in args.lengths.split(",")]
    tmp = None
    if args.launch:
        from tests.conftest import write_local_fleet

        tmp = tempfile.TemporaryDirectory(prefix="bench-p2p-")
        fleet_file = write_local_fleet(Path(tmp.name) / "fleet.yaml", 2, name="bench")
    else:
        fleet_file = Path(args.fleet)
    ctx = launch.FleetContext.load(fleet_file)
    timings = {}
    try:
        if args.launch:
            t = time.monotonic()
            launch.up(ctx)
            timings["up (s)"] = time.monotonic() - t
            t = time.monotonic()
            launch.wait(ctx, timeout=120)
            timings["wait for registration (s)"] = time.monotonic() - t
        with console.status("measuring ...") as status:
            rows = measure(ctx, lengths, args.repeats, progress=status.update)
    finally:
        if args.launch:
            launch.down(ctx)
            tmp.cleanup()
    if timings:
        console.print("  ".join(f"{k}: {v:.1f}" for k, v in timings.items()))
    table = Table(title=f"P2P pull vs recompute on node B (median of {args.repeats})")
    for col in ("prompt tokens", "TTFT cold on A ms", "TTFT pulled on B ms", "TTFT recompute on B ms",
                "cached on B", "recompute / pull"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(str(r.tokens), f"{r.ttft_cold_a_s * 1000:.0f}", f"{r.ttft_pulled_b_s * 1000:.0f}",
                      f"{r.ttft_recompute_b_s * 1000:.0f}", str(r.cached_tokens_b), f"{r.speedup:.2f}x")
    console.print(table)
    wins = [r.tokens for r in rows if r.speedup > 1.0]
    console.print(f"pull beats recompute from {min(wins)} tokens" if wins else "pull never beat recompute here")
    return 0


if __name__ == "__main__":
    sys.exit(main())
