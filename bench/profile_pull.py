"""Where a real-size pull goes: py-spy profiles of the engine side and both lmcache servers during the pull.

`python -m bench.profile_pull [--tokens 4096] [--pulls 3] [--native] [--out DIR]`, under the fleet lock (it starts
kv_real's 2-node fleet). Each pull is kv_real's (store through node A, then lookup + retrieve through node B, every
byte checked); py-spy records only the lookup + retrieve, in three processes at once: this one (it is the engine,
and in engine-driven mode the retrieve's copy into paged KV runs here) and each server's process tree. Prints per
process the frames with the largest own and cumulative share of that process's samples, and writes that table,
the pulls' figures and the raw collapsed stacks to DIR (default bench/results/profile-pull-<date>/).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import datetime as dt
import os
import signal
import statistics
import subprocess
import sys
from pathlib import Path

from bench.suite.kv_real import VOCAB, pull_once, sides
from p2p_ops.harness.soak.sampler import sample, soak_units
from p2p_ops.resources import CHECKOUT
from p2p_runtime.config import EngineConfig
from p2p_runtime.profiles import PROFILES

PY_SPY = Path(sys.executable).with_name("py-spy")
TOP = 12


@contextlib.contextmanager
def recording(pids: dict[str, int], out: Path, rate: int, native: bool):
    """py-spy on each pid (with its children) while the block runs; raw stacks appended to out/<name>.raw."""
    spies = {}
    for name, pid in pids.items():
        cmd = [str(PY_SPY), "record", "--pid", str(pid), "--subprocesses", "--rate", str(rate), "--format", "raw",
               "--nolineno", "-o", str(out / f"{name}.part")]
        # --native pauses the process per sample; only the engine's torch frames need it.
        cmd += ["--native"] if native and name == "engine" else ["--nonblocking"]
        spies[name] = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for name, spy in spies.items():  # sampling has begun once py-spy says so
        said = ""
        while (line := spy.stdout.readline()) and "Sampling" not in line:
            said += line
        if not line:
            raise RuntimeError(f"py-spy on {name} (pid {pids[name]}) did not start: {said.strip()}")
    try:
        yield
    finally:
        for spy in spies.values():
            spy.send_signal(signal.SIGINT)
        for name, spy in spies.items():
            spy.communicate(timeout=60)
            part = out / f"{name}.part"
            if part.exists():
                with (out / f"{name}.raw").open("a") as raw:
                    raw.write(part.read_text())
                part.unlink()


def top_frames(raw: Path) -> tuple[int, list[tuple[str, float, float]]]:
    """(samples, [(frame, own share, cumulative share)]) from py-spy's raw stacks, largest cumulative first."""
    own, cum, total = collections.Counter(), collections.Counter(), 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        # --subprocesses roots each stack at "process <pid>:<command line>": not a frame.
        frames, n = [f for f in stack.split(";") if not f.startswith("process ")], int(count)
        if not frames:
            continue
        total += n
        own[frames[-1]] += n
        for f in set(frames):
            cum[f] += n
    # The largest own times first (where the CPU is), then the callers that hold the most of the rest.
    hot = [f for f, _ in own.most_common(TOP // 2)]
    hot += [f for f, _ in cum.most_common() if f not in hot][: TOP - len(hot)]
    return total, [(f, own[f] / total, cum[f] / total) for f in sorted(hot, key=lambda f: -cum[f])]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.profile_pull", description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="llama-3-8b", choices=sorted(PROFILES))
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--pulls", type=int, default=3)
    ap.add_argument("--rate", type=int, default=100, help="py-spy samples per second")
    ap.add_argument("--threads", type=int, default=EngineConfig.threads,
                    help="this process's torch threads (default: the engine's)")
    ap.add_argument("--native", action="store_true", help="the engine's C/C++ frames too (pauses it per sample)")
    ap.add_argument("--out", default="", help="default bench/results/profile-pull-<date>")
    args = ap.parse_args(argv)
    if not PY_SPY.exists():
        ap.error(f"{PY_SPY} not found: pip install py-spy into this venv")
    os.environ.setdefault("LMCACHE_TRACK_USAGE", "false")
    out = Path(args.out or CHECKOUT / "bench" / "results" / f"profile-pull-{dt.date.today()}")
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.raw"):
        old.unlink()
    profile = PROFILES[args.profile]
    pulls = []
    with sides(profile, args.tokens, args.threads) as (ctx, writer, reader, rng):
        servers = [r for r in sample(ctx, soak_units(ctx), 0.0) if r.role == "server" and r.pid]
        pids = {"engine": os.getpid(), **{r.unit.replace("/", "-"): r.pid for r in servers}}
        for _ in range(args.pulls):
            tokens = [rng.randrange(VOCAB) for _ in range(args.tokens + 1)]
            pulls.append(pull_once(writer, reader, tokens, lambda: recording(pids, out, args.rate, args.native)))
    lines = _report(args, profile.name, pulls, pids, out)
    (out / "top-frames.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines) + f"\n\nwrote {out}/top-frames.md and the raw stacks beside it")
    return 0 if all(p["ok"] for p in pulls) else 1


def _report(args, profile: str, pulls: list[dict], pids: dict[str, int], out: Path) -> list[str]:
    def fig(k: str) -> str:
        vals = [p[k] * 1e3 for p in pulls]
        return f"{statistics.median(vals):.0f} ms ({min(vals):.0f}-{max(vals):.0f})"

    mib = pulls[0]["bytes"] / 2**20
    mbps = pulls[0]["bytes"] / statistics.median(p["pull"] for p in pulls) / 1e6
    wall = sum(p["pull"] for p in pulls)
    lines = [f"# py-spy profile of {len(pulls)} pulls of {mib:.0f} MiB ({profile}, {args.tokens} tokens)", "",
             f"{dt.datetime.now():%Y-%m-%d %H:%M}, load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} CPUs, "
             f"{args.rate} Hz{', engine with --native' if args.native else ''}, {args.threads} torch thread(s); "
             f"verified {sum(p['ok'] for p in pulls)}/{len(pulls)}", "",
             f"pull {fig('pull')} = lookup {fig('lookup')} + retrieve {fig('retrieve')}; {mbps:.0f} MB/s "
             "(median, min-max)"]
    for name in pids:
        raw = out / f"{name}.raw"
        total, frames = top_frames(raw) if raw.exists() else (0, [])
        lines += ["", f"## {name} (pid {pids[name]}): {total} samples, {total / args.rate / wall:.2f} cores busy "
                      "over the recorded pulls", "", "| frame | own | cumulative |", "|---|---:|---:|"]
        lines += [f"| `{f}` | {o:.1%} | {c:.1%} |" for f, o, c in frames]
    return lines


if __name__ == "__main__":
    sys.exit(main())
