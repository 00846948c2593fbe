"""Reproduce: from the repository root, as root (netns testbed), `python bench/results/compare-2026-12-02/reproduce.py /tmp/cmp-demo`.

compare on a 2-host netns testbed fleet with `test longdoc` (TTFT p50/p99 over every cross-node query): a baseline
of 3 runs, 3 unchanged reruns (must not be flagged), 3 runs with h1's egress rate-limited by tc tbf inside its
namespace (must be flagged). Nothing touches lo."""
import os, subprocess, sys, time
from pathlib import Path
sys.path.insert(0, os.getcwd())
from bench import testbed
from p2p_ops.harness.faults.scenarios import rate_limit
from p2p_ops.lifecycle import launch
from p2p_ops.lifecycle.context import FleetContext
from tests.multinode.conftest import write_ssh_fleet

tmp = Path(sys.argv[1]); tmp.mkdir(parents=True, exist_ok=True)
env = {**os.environ, "LMCACHE_TRACK_USAGE": "false", "PYTHONPATH": os.getcwd(), "NO_COLOR": "1", "COLUMNS": "160"}

def cli(*a):
    t = time.time()
    r = subprocess.run([sys.executable, "-m", "p2p_ops.cli", *a, "-f", str(fleet)], capture_output=True, text=True,
                       env=env, timeout=600)
    print(f"\n$ p2pctl {' '.join(a)}   -> exit {r.returncode} ({time.time()-t:.0f} s)", flush=True)
    print(r.stdout[-6000:], r.stderr[-1500:] if r.returncode not in (0, 1) else "", flush=True)
    return r.returncode

LOAD = ("test", "longdoc", "--document-length", "4096", "--num-documents", "4", "--queries-per-document", "3",
        "--inflight", "1", "--seed", "42")
with testbed.running(2, testbed.private_dir(), netns=True) as tb:
    fleet = write_ssh_fleet(tb, tmp, "cmp", settings={"ucx_tls": "tcp"})
    with FleetContext.load(fleet) as ctx:
        try:
            launch.up(ctx); launch.wait(ctx, timeout=180)
            print("fleet up", flush=True)
            def three(tag):
                before = {p.name for p in ctx.layout.tests.iterdir()} if ctx.layout.tests.is_dir() else set()
                for i in range(3):
                    cli(*LOAD[:-1], str(42 + i + {"base": 0, "same": 10, "slow": 20}[tag]))
                return sorted(p.name for p in ctx.layout.tests.iterdir() if p.name not in before)
            base = three("base")
            cli("baseline", "save", "before", *sum((["--run", r] for r in base), []))
            same = three("same")
            cli("compare", "before", *same)
            cli("compare", "before", *same, "--json")
            node = ctx.fleet.nodes[0]
            lim = rate_limit(ctx, node, 900, 64000)
            print("slowed:", lim.what, flush=True)
            try:
                slowed = three("slow")
            finally:
                lim.undo()
            cli("compare", "before", *slowed)
            cli("compare", "before", *slowed, "--json")
            cli("baseline", "list")
        finally:
            launch.down(ctx)
