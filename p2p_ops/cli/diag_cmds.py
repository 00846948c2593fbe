"""Diagnose commands: `p2pctl rdma`, `p2pctl probe-nixl`, `p2pctl rails`, `p2pctl ucx-trace`."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import BinaryIO

from p2p_ops import files
from p2p_ops.causes import CAUSES
from p2p_ops.cli.common import done, verb
from p2p_ops.diagnose.findings import Report
from p2p_ops.errors import BadInput, CouldNotRun

# A UCX/NIXL log worth summarising fits in memory; past this, cut it to the part that matters first.
TRACE_CAP = 1 << 30
_SIZE = re.compile(r"^(\d+)\s*([kmgt]?)(?:i?b)?$", re.I)


def parse_size(text: str) -> int:
    """`16M`, `64KiB`, `1g`, `4096` -> bytes (binary units)."""
    m = _SIZE.match(text.strip())
    if not m or int(m[1]) == 0:
        raise BadInput(f"size {text!r} is not a positive byte count like 4096, 64K, 16M or 1G")
    return int(m[1]) << (10 * " kmgt".index((m[2] or " ").lower()))


def _emit(args, report: Report, extra_lines: list[str] | None = None) -> int:
    return done(args, report.to_dict(), lambda: print("\n".join([report.title, *(extra_lines or []),
                                                                 *report.render().splitlines()[1:]])),
                report.exit_code)


def _port_table(report: Report) -> list[str]:
    rows = report.facts.get("ports", [])
    head = (f"  {'port':<18} {'state':<8} {'phys':<10} {'layer':<11} {'rate':<22} {'numa':>4}  "
            f"{'gid(v2,ipv4)':<18}  netdev")
    return ([head] if rows else []) + [
        f"  {r['device'] + '/' + str(r['port']):<18} {r['state']:<8} {r['phys_state']:<10} {r['link_layer']:<11} "
        f"{r['rate']:<22} {str(r['numa_node']):>4}  {r['roce_v2_ipv4_gid'] or '-':<18}  {r['netdev'] or '-'}"
        for r in rows]


def cmd_rdma(args) -> int:
    from p2p_ops.diagnose.nixl.probe import agent_lanes
    from p2p_ops.diagnose.rdma.check import check_rdma, gather_rdma
    from p2p_ops.facts.host_view import HostView

    if args.root and args.sysfs_root:
        raise BadInput("use --root (a whole snapshot tree) or --sysfs-root (a copy of /sys), not both")
    if args.pid != "self" and not str(args.pid).isdecimal():
        raise BadInput(f"--pid {args.pid!r} must be a process id (e.g. the lmcache server's) or 'self'")
    host = HostView.snapshot(args.root) if args.root else HostView.local(args.sysfs_root)
    nixl = agent_lanes if host.live else None
    report = check_rdma(gather_rdma(host, args.pid, nixl_lanes=nixl), require_rdma=args.require_rdma)
    return _emit(args, report, _port_table(report))


def _probe_env(args) -> dict[str, str]:
    env = {}
    for item in args.env or []:
        key, sep, value = item.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise BadInput(f"--env {item!r} must look like NAME=VALUE, e.g. --env UCX_MAX_RMA_RAILS=2")
        env[key] = value
    if args.tls is not None:
        env["UCX_TLS"] = args.tls
    if args.net_devices is not None:
        env["UCX_NET_DEVICES"] = args.net_devices
    return env


def _probe_lines(result) -> list[str]:
    if result.ok:
        path = result.read_path
        how = ("software emulation over " if path.get("emulated") else "") + ", ".join(path.get("lanes", []))
        return [f"  READ ok: {result.iterations} x {result.size_bytes} bytes verified "
                f"({result.bytes_checked} bytes), median {result.throughput_gbps} GB/s, backend {result.backend}",
                f"  UCX {result.ucx_version or '?'}; transports: {', '.join(result.transports) or '?'}",
                f"  READ path: {path.get('class', '?')} ({how or '?'}) [{path.get('source', '')}]"]
    f = result.failure
    lines = [f"  READ failed on the {f.side} at stage {f.stage}: {f.exc_class}: {f.message}"]
    lines += ([f"  cause ({f.cause.id}): {CAUSES[f.cause.id].means}", f"  fix:   {f.cause.fix}"] if f.cause else
              ["  cause: not recognised: read the exception and the UCX/NIXL lines below"])
    return lines + [f"  evidence: {e}" for e in f.evidence]


def cmd_probe_nixl(args) -> int:
    from p2p_ops.diagnose.nixl.probe import ProbeOptions, run_probe

    if args.iterations < 1 or args.timeout <= 0:
        raise BadInput("--iterations must be >= 1 and --timeout > 0")
    options = ProbeOptions(env=_probe_env(args), size_bytes=parse_size(args.size), iterations=args.iterations,
                           timeout_s=args.timeout, keep_logs=Path(args.keep_logs) if args.keep_logs else None)
    result = run_probe(options)
    env = " ".join(f"{k}={v}" for k, v in result.env.items())
    return done(args, result.to_dict(), lambda: print("\n".join([f"NIXL READ probe ({env})", *_probe_lines(result),
                                                                  f"  wall time {result.wall_s}s"])),
                result.exit_code)


def _load_snapshot(path: str, flag: str):
    from p2p_ops.diagnose.rails import Snapshot

    try:
        return Snapshot.from_dict(files.read_json(path, 16 << 20, "give a file --save-snapshot wrote"))
    except BadInput as exc:
        raise BadInput(f"{flag} {exc}") from None
    except ValueError as exc:
        raise BadInput(f"{flag} {path}: not a rail snapshot ({exc})") from None


def _during(args) -> str:
    command = [c for c in args.cmd if c != "--"] if args.cmd else []
    if not command:
        time.sleep(args.wait)
        return f"waited {args.wait:g}s"
    try:
        # The command's output goes to stderr so stdout stays one report (valid JSON with --json).
        proc = subprocess.run(command, timeout=args.timeout, check=False, stdout=2)
    except FileNotFoundError as exc:
        raise BadInput(f"command not found: {command[0]}") from exc
    except subprocess.TimeoutExpired as exc:
        raise CouldNotRun(f"`{' '.join(command)}` ran past --timeout {args.timeout:g}s") from exc
    return f"ran `{' '.join(command)}` (exit {proc.returncode})"


def cmd_rails(args) -> int:
    from p2p_ops.diagnose.rails import assess, diff, snapshot
    from p2p_ops.facts.host_view import check_copy

    sysfs = Path(args.sysfs_root or "/sys")
    check_copy(sysfs, "--sysfs-root", "point it at a copy of /sys")
    if args.save_snapshot:
        files.write_json(args.save_snapshot, snapshot(sysfs).to_dict())
        print(f"snapshot written to {args.save_snapshot}")
        return 0
    if args.after and not args.before:
        raise BadInput("--after needs --before")
    before = _load_snapshot(args.before, "--before") if args.before else snapshot(sysfs)
    window = "from snapshot files" if args.before else _during(args)
    after = _load_snapshot(args.after, "--after") if args.after else snapshot(sysfs)
    expected = [e for e in (args.expect or "").split(",") if e]
    report = assess(diff(before, after), expected or None, args.min_bytes, args.imbalance)
    report.facts["window"] = window
    return _emit(args, report, [f"  window: {window}", *_rails_table(report)])


def _rails_table(report: Report) -> list[str]:
    rows = report.facts.get("rails", [])
    return ([f"  {'rail':<18} {'kind':<5} {'tx bytes':>16} {'rx bytes':>16}"] if rows else []) + [
        f"  {r['name']:<18} {r['kind']:<5} {r['tx_bytes']:>16,} {r['rx_bytes']:>16,}"
        + ("  (counter reset)" if r["reset"] else "") for r in sorted(rows, key=lambda r: -r["total"])]


def read_stdin(stream: BinaryIO, cap: int) -> str:
    """At most `cap` bytes of a pipe, as text: one that goes on (`yes | p2pctl ucx-trace -`) is refused there."""
    data = stream.read(cap + 1)
    if len(data) > cap:
        raise BadInput(f"stdin: more than the {cap:,} bytes ucx-trace reads; save the log to a file and pass a "
                       "part of it")
    return data.decode("utf-8", errors="replace")


def cmd_ucx_trace(args) -> int:
    from p2p_ops.diagnose.traces import render_endpoints, trace_report
    from p2p_ops.facts.ucx_trace import parse_traces

    texts = []
    for name in args.files:
        if name == "-":
            texts.append(("<stdin>", read_stdin(sys.stdin.buffer, TRACE_CAP)))
            continue
        try:
            texts.append((name, files.read_text(name, TRACE_CAP)))
        except files.Refused as exc:
            raise BadInput(f"{exc}{' (read a pipe as `-`, from stdin)' if 'regular file' in exc.reason else ''}"
                           ) from None
    report = trace_report(parse_traces(texts), expect_rdma=args.expect_rdma)
    return _emit(args, report, render_endpoints(report))


REPORT = "machine-readable report"
SYSFS_ROOT = dict(metavar="DIR", help="read this directory instead of /sys")


def register(subparsers) -> None:
    p = verb(subparsers, "rdma", cmd_rdma, fleet=False, json=REPORT,
             help="RDMA readiness: ports, GIDs, uverbs, memlock, GPUDirect, affinity",
             description="Check whether this host can do RDMA for NIXL/UCX; without RDMA, check the TCP path. Reads "
             "/sys/class/infiniband (state, phys_state, link_layer, rate, GIDs, NUMA node), /dev/infiniband, the "
             "memlock limit (of --pid, e.g. a running lmcache server, else this process), loaded modules "
             "(nvidia_peermem), `nvidia-smi topo -m` and `ucx_info -d`. Each finding names the device/port, the "
             "value seen and the fix; healthy output ends with \"result: healthy\". Exit 0 healthy, 1 findings, 2 "
             "could not check.")
    p.add_argument("--sysfs-root", **SYSFS_ROOT)
    p.add_argument("--root", metavar="DIR", help="a captured snapshot tree (sys/, dev/, proc/, tools/*.txt)")
    p.add_argument("--pid", default="self", help="check the memlock limit of this process (default: self)")
    p.add_argument("--require-rdma", action="store_true", help="a host without RDMA devices is a finding (exit 1)")

    p = verb(subparsers, "probe-nixl", cmd_probe_nixl, fleet=False, json="machine-readable result",
             help="real two-process NIXL READ under a candidate UCX environment",
             description="Run a NIXL agent pair on this host, READ and verify a buffer, and report the bytes "
             "verified, the median throughput and the transports and READ path UCX chose (from its "
             "UCX_LOG_LEVEL=info / UCX_PROTO_INFO log); on failure, the exception with its likely cause and fix. "
             "Metadata goes through files, not the NIXL listener. Exit 0 the READ worked, 1 it failed, 2 could "
             "not run.",
             epilog="example: %(prog)s --tls tcp --net-devices lo   (the TCP path, on loopback)")
    p.add_argument("--tls", metavar="LIST", help="UCX_TLS for the agents, e.g. tcp or rc,sm,self")
    p.add_argument("--net-devices", metavar="LIST", help="UCX_NET_DEVICES, e.g. lo or mlx5_0:1,mlx5_1:1")
    p.add_argument("--env", action="append", metavar="NAME=VALUE", help="any other variable (repeatable)")
    p.add_argument("--size", default="16M", help="bytes per READ (default 16M)")
    p.add_argument("--iterations", type=int, default=3, help="READs to time (default 3)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds before giving up (default 60)")
    p.add_argument("--keep-logs", metavar="DIR", help="copy the agents' logs and results here")

    p = verb(subparsers, "rails", cmd_rails, fleet=False, json=REPORT,
             help="which NICs carried the bytes: counter deltas around a transfer",
             description="Snapshot per-NIC byte counters (RDMA ports from counters/port_{xmit,rcv}_data, x4: they "
             "count 4-byte words; TCP interfaces from /sys/class/net/<if>/statistics), wait or run a command, "
             "snapshot again, and flag idle, unexpected or imbalanced rails. --save-snapshot on each node and "
             "--before/--after later compare two moments without running anything in between.",
             epilog="example: %(prog)s --expect mlx5_0,mlx5_1 -- p2pctl test basic")
    p.add_argument("--sysfs-root", **SYSFS_ROOT)
    p.add_argument("--expect", metavar="IFS", help="comma list of expected rails (mlx5_0, mlx5_0:1, eth0); others "
                   "carrying traffic are flagged; without it, all RDMA ports are compared for balance")
    p.add_argument("--wait", type=float, default=5.0, help="seconds to watch when no command is given (default 5)")
    p.add_argument("--timeout", type=float, default=600.0, help="limit for the command (default 600 s)")
    p.add_argument("--before", metavar="FILE", help="snapshot JSON taken earlier (see --save-snapshot)")
    p.add_argument("--after", metavar="FILE", help="snapshot JSON to compare with --before")
    p.add_argument("--save-snapshot", metavar="FILE", help="only write a snapshot JSON and exit")
    p.add_argument("--min-bytes", type=int, default=1 << 20, help="ignore rails below this (default 1 MiB)")
    p.add_argument("--imbalance", type=float, default=2.0, help="flag a rail below busiest/RATIO (default 2)")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- COMMAND to run between the snapshots")

    p = verb(subparsers, "ucx-trace", cmd_ucx_trace, fleet=False, json=REPORT,
             help="summarise UCX/NIXL logs: lanes per endpoint, grouped errors",
             description="Parse UCX log lines (any version's padding, the fatal form), endpoint-configuration lines "
             "(`rma(rc_mlx5/mlx5_0:1)` = RDMA, `rma_am(tcp/eth0)` = emulated), UCX_PROTO_INFO tables (1.13, "
             "1.15-1.19 and 1.23 layouts), `ucx_info -e` dumps and NIXL core/Python/vLLM lines into a per-endpoint "
             "transport summary plus grouped errors. Capture logs with UCX_LOG_LEVEL=info (and UCX_PROTO_INFO=y "
             "for the protocol tables). Exit 0 no errors, 1 errors (or, with --expect-rdma, inter-node payload not "
             "on RDMA), 2 nothing parsed.")
    p.add_argument("files", nargs="+", metavar="FILE", help="log files ('-' for stdin)")
    p.add_argument("--expect-rdma", action="store_true", help="inter-node payload not on RDMA is a finding")
