"""Run the benchmarks: `python -m bench.suite [--quick] [--only kv,loadgen,...] [--out DIR]`.

Each benchmark runs in turn; one that fails is recorded and the next one still runs. The run's
results.md is also copied to bench/results/latest.md (the README's results section is made from it).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import sys
import time
import traceback
from pathlib import Path

from bench.suite import engines, eviction, fleet_scale, kv_path, kv_real, kv_settings, l1_reg, loadgen, loadgen_peers, steady_cost
from bench.suite.report import Report, replace_readme_targets
from p2p_ops.resources import CHECKOUT

# Results stay in the checkout beside bench/README.md (bench/results/example*/ are committed runs).
RESULTS = CHECKOUT / "bench" / "results"

# Order matters only for the reader: the KV path is what the issue is about.
BENCHES = {"kv": kv_path.run, "kvreal": kv_real.run, "l1reg": l1_reg.run, "loadgen": loadgen.run,
           "loadpeers": loadgen_peers.run, "engines": engines.run, "fleet": fleet_scale.run}
FULL_ONLY = {"evict": eviction.run, "kvset": kv_settings.run, "idle": steady_cost.run, "vllm": engines.run_vllm}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.suite", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, no vLLM (under 10 minutes)")
    ap.add_argument("--only", default="", help="comma-separated subset of: " + ",".join([*BENCHES, *FULL_ONLY]))
    ap.add_argument("--out", default="", help="results folder (default bench/results/<stamp>)")
    ap.add_argument("--readme", action="store_true",
                    help="write this run's box line and targets table into README.md (make bench-quick does)")
    ap.add_argument("--tiny", action="store_true", help="smallest sizes; for the runner's own tests")
    args = ap.parse_args(argv)
    os.environ.setdefault("LMCACHE_TRACK_USAGE", "false")
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = Path(args.out) if args.out else RESULTS / stamp
    report = Report(out, size="tiny" if args.tiny else "quick" if args.quick else "full")
    benches = dict(BENCHES)
    if not (args.quick or args.tiny):
        benches.update(FULL_ONLY)
    if args.only:
        wanted = args.only.split(",")
        unknown = [w for w in wanted if w not in {**BENCHES, **FULL_ONLY}]
        if unknown:
            ap.error(f"unknown benchmark(s): {', '.join(unknown)}")
        benches = {k: v for k, v in {**BENCHES, **FULL_ONLY}.items() if k in wanted}
    print(f"results -> {out}  (nproc {report.box['nproc']}, load average {report.box['loadavg']})")
    for name, fn in benches.items():
        started = time.monotonic()
        try:
            fn(report)
        except KeyboardInterrupt:
            report.failed(name, "interrupted")
            break
        except Exception as exc:
            report.failed(name, f"{type(exc).__name__}: {exc}")
            traceback.print_exc()
        finally:
            report.timings[name] = time.monotonic() - started
    report.finish()
    if not args.out:
        shutil.copyfile(out / "results.md", RESULTS / "latest.md")
    if args.readme:
        readme = CHECKOUT / "README.md"
        readme.write_text(replace_readme_targets(readme.read_text(), report))
        print(f"updated the targets table in {readme}")
    print(f"\nwrote {out}/results.md  (total {sum(report.timings.values()):.0f} s)")
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
