#!/usr/bin/env python3
"""Benchmark: fleet launch times and P2P pull versus recompute on node B, per prompt length.

usage: scripts/bench_p2p.py [-f fleet.yaml | --launch] [--lengths 256,1024,2048,4096] [--repeats 3]

With --launch it brings up a temporary 2-node local fleet on free ports (and takes it down afterwards),
timing `up` and `wait`. Prints a table and the pull/recompute ratio per length; this is a benchmark, not a
test: it asserts nothing and exits 0 unless something could not run. Lengths that do not fit the engines'
context (prompt + 1 generated token) are skipped; a length that fails keeps the rows measured before it.
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
    doc = __doc__.splitlines()
    ap = argparse.ArgumentParser(description=doc[0], usage=doc[2].removeprefix("usage: "),
                                 epilog="exit codes: 0 measured, 1 a length failed (earlier rows kept), 2 bad input")
    ap.add_argument("-f", "--fleet", default="fleet.yaml")
    ap.add_argument("--launch", action="store_true", help="start a temporary local fleet for the benchmark")
    ap.add_argument("--lengths", default="256,1024,2048,4096")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    from p2p_ops.lifecycle import launch
    from p2p_ops.lifecycle.context import FleetContext
    from p2p_ops.harness.crossover import measure

    console = Console(stderr=True)
    out = Console(width=None if sys.stdout.isatty() else 100_000)
    try:
        lengths = [int(x) for x in args.lengths.split(",") if x.strip()]
    except ValueError:
        ap.error(f"--lengths {args.lengths!r}: give token counts separated by commas, e.g. 256,1024,2048")
    tmp = None
    if args.launch:
        import yaml

        from p2p_ops.cli.demo import free_base
        from p2p_ops.spec.starter import local_fleet

        tmp = tempfile.TemporaryDirectory(prefix="bench-p2p-")
        fleet_file = Path(tmp.name) / "fleet.yaml"
        fleet_file.write_text(yaml.safe_dump(local_fleet(2, name="bench", base=free_base(2)), sort_keys=False))
    else:
        fleet_file = Path(args.fleet)
    ctx = FleetContext.load(fleet_file)
    timings = {}
    rows, failed = [], None
    try:
        if args.launch:
            t = time.monotonic()
            launch.up(ctx)
            timings["up (s)"] = time.monotonic() - t
            t = time.monotonic()
            launch.wait(ctx, timeout=120)
            timings["wait for registration (s)"] = time.monotonic() - t
        # The byte-level engine spends one token per character plus BOS, and the answer needs one more.
        limit = ctx.fleet.engine.max_model_len - 2
        skipped = [n for n in lengths if n > limit]
        if skipped:
            console.print(f"skipping {skipped}: longer than the context ({limit} prompt tokens fit)")
        with console.status("measuring ...") as status:
            for n in (n for n in lengths if n <= limit):
                try:
                    rows += measure(ctx, [n], args.repeats, progress=status.update)
                except Exception as exc:  # noqa: BLE001 - report it, keep the finished rows
                    failed = f"{n} tokens: {exc}"
                    break
    finally:
        if args.launch:
            launch.down(ctx)
            tmp.cleanup()
    if timings:
        out.print("  ".join(f"{k}: {v:.1f}" for k, v in timings.items()))
    table = Table(title=f"P2P pull vs recompute on node B (median of {args.repeats})")
    for col in ("prompt tokens", "TTFT cold on A ms", "TTFT pulled on B ms", "TTFT recompute on B ms",
                "cached on B", "recompute / pull"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(str(r.tokens), f"{r.ttft_cold_a_s * 1000:.0f}", f"{r.ttft_pulled_b_s * 1000:.0f}",
                      f"{r.ttft_recompute_b_s * 1000:.0f}", str(r.cached_tokens_b), f"{r.speedup:.2f}x")
    out.print(table)
    wins = [r.tokens for r in rows if r.speedup > 1.0]
    out.print(f"pull beats recompute from {min(wins)} tokens" if wins else "pull never beat recompute here")
    if failed:
        console.print(f"[red]stopped at {failed}[/red] (the rows above were measured before it)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
