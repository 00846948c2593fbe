"""`p2pctl test ...`: run tests against a running fleet and leave their evidence in the run folder."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.table import Table

from p2p_ops.cli.fleet_cmds import _progress, add_fleet_args, context
from p2p_ops.errors import EXIT_CHECK_FAILED, EXIT_OK
from p2p_ops.harness.basic import BasicResult, run_basic

console = Console()


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("test", help="test a running fleet (basic: the cross-node proof)")
    tsub = p.add_subparsers(dest="test_kind", metavar="KIND")
    b = tsub.add_parser("basic", help="cold on A, served from A's cache on B, identical outputs")
    add_fleet_args(b)
    b.add_argument("--a", default=None, help="instance that computes the prompt (default: first instance)")
    b.add_argument("--b", default=None, help="instance that must get it from A (default: one on another node)")
    b.add_argument("--chunks", type=int, default=8, help="prompt length in full chunks (default 8)")
    b.add_argument("--max-tokens", type=int, default=24, help="tokens to generate (default 24)")
    b.add_argument("--seed", type=int, default=None, help="prompt seed (default: new every run)")
    b.add_argument("--json", action="store_true", help="print the result as JSON")
    b.set_defaults(handler=cmd_basic)


def cmd_basic(args: argparse.Namespace) -> int:
    ctx = context(args)
    try:
        result = run_basic(ctx, a=args.a, b=args.b, chunks=args.chunks, max_tokens=args.max_tokens,
                           seed=args.seed, progress=_progress)
    finally:
        ctx.close()
    if args.json:
        import json

        print(json.dumps(result.to_dict(), indent=2))
    else:
        print_basic(result)
    return EXIT_OK if result.passed else EXIT_CHECK_FAILED


def _fmt_s(v) -> str:
    return f"{v * 1000:.0f} ms" if isinstance(v, (int, float)) else "-"


def print_basic(result: BasicResult) -> None:
    table = Table(title=f"cross-node proof {result.a} -> {result.b}")
    table.add_column("check")
    table.add_column("result")
    table.add_column("detail", overflow="fold")
    for c in result.checks:
        table.add_row(c.name, "[green]PASS[/green]" if c.ok else "[red]FAIL[/red]", c.detail)
    console.print(table)
    n = result.numbers
    nums = Table(title="numbers")
    for col in ("TTFT cold on A", "TTFT on B (from peer)", "TTFT control on B", "prompt tokens",
                "cached tokens on B", "P2P loads on B", "KV bytes pulled"):
        nums.add_column(col)
    nums.add_row(_fmt_s(n["ttft_cold_a_s"]), _fmt_s(n["ttft_peer_b_s"]), _fmt_s(n["ttft_control_b_s"]),
                 str(n["prompt_tokens"]), str(n["cached_tokens_b"]), f"{n['p2p_loads_b']:g}",
                 f"{n['kv_bytes_pulled_b']:,.0f}")
    console.print(nums)
    verdict = "[bold green]PASS[/bold green]" if result.passed else "[bold red]FAIL[/bold red]"
    console.print(f"{verdict} — evidence in {result.run_dir}")
    if result.likely_cause:
        console.print(f"[red]likely cause:[/red] {result.likely_cause}")
