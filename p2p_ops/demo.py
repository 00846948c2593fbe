"""`make demo`: a whole P2P fleet on this machine and the cross-node proof, then everything stopped.

Writes p2p-run/demo.yaml (2 local nodes on free ports), brings the fleet up, waits until both servers are
registered, runs `p2pctl test basic`, prints a summary table and takes the fleet down, also on failure.
"""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path

import yaml
from rich.console import Console
from rich.table import Table

from p2p_ops import launch
from p2p_ops.cli.test_cmds import print_basic
from p2p_ops.errors import P2POpsError
from p2p_ops.fleet import local_fleet
from p2p_ops.harness.basic import run_basic

console = Console()


def _free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def _free_base(n: int) -> dict[str, int]:
    """The default port plan, shifted by 1000s until every port is free (a user's fleet may be running)."""
    for off in range(0, 20000, 1000):
        base = {"coordinator": 9300 + off, "mp": 5600 + off, "http": 8080 + off, "p2p": 8550 + off,
                "engine": 8000 + off}
        ports = [base["coordinator"]] + [base[k] + i + 1 for k in ("mp", "http", "p2p", "engine") for i in range(n)]
        if all(_free(p) for p in ports):
            return base
    raise P2POpsError("no free port range for the demo fleet")


def main(root: str = "p2p-run") -> int:
    started = time.monotonic()
    fleet_file = Path(root) / "demo.yaml"
    fleet_file.parent.mkdir(parents=True, exist_ok=True)
    fleet_file.write_text(yaml.safe_dump(local_fleet(2, name="demo", base=_free_base(2)), sort_keys=False))
    ctx = launch.FleetContext.load(fleet_file, run_dir=str(Path(root) / "demo"))
    console.rule("[bold]LMCache P2P demo: 2 nodes, real lmcache servers, CPU engines")
    console.print(f"fleet spec {fleet_file}, state in {ctx.layout.root}")
    stamps: dict[str, float] = {}
    result = None
    try:
        with console.status("starting coordinator, lmcache servers and engines ...") as status:
            def progress(msg: str) -> None:
                status.update(msg)
                console.print(f"[dim]·[/dim] {msg}")

            t = time.monotonic()
            launch.up(ctx, progress=progress)
            stamps["up"] = time.monotonic() - t
            t = time.monotonic()
            status.update("waiting for registration ...")
            launch.wait(ctx, timeout=60, progress=progress)
            stamps["registered"] = time.monotonic() - t
            t = time.monotonic()
            status.update("cross-node proof ...")
            result = run_basic(ctx, progress=progress)
            stamps["proof"] = time.monotonic() - t
        print_basic(result)
    except P2POpsError as exc:
        console.print(f"[red]demo failed:[/red] {exc}")
    finally:
        with console.status("stopping the fleet ..."):
            launch.down(ctx)
        ctx.close()
    if result is None:
        return 1
    _summary(result, stamps, time.monotonic() - started)
    return 0 if result.passed else 1


def _summary(result, stamps: dict[str, float], total: float) -> None:
    n = result.numbers
    table = Table(title="demo summary")
    for col in ("TTFT cold on A", "TTFT on B from peer", "speed-up", "cached tokens on B", "KV bytes pulled",
                "P2P loads", "result"):
        table.add_column(col)
    speed = f"{n['speedup_ttft']:.1f}x" if n.get("speedup_ttft") else "-"
    table.add_row(f"{n['ttft_cold_a_s'] * 1000:.0f} ms", f"{n['ttft_peer_b_s'] * 1000:.0f} ms", speed,
                  f"{n['cached_tokens_b']} / {n['prompt_tokens']}", f"{n['kv_bytes_pulled_b'] / 2**20:.2f} MiB",
                  f"{n['p2p_loads_b']:g}", "[green]PASS[/green]" if result.passed else "[red]FAIL[/red]")
    console.print(table)
    timing = ", ".join(f"{k} {v:.0f} s" for k, v in stamps.items())
    console.print(f"{'PASS' if result.passed else 'FAIL'} in {total:.0f} s ({timing}); evidence: {result.run_dir}")


if __name__ == "__main__":
    sys.exit(main())
