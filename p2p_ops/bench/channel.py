"""LMCache's own transfer-channel benchmark (`lmcache tool transfer-channel-benchmark`) between two nodes.

The channel LMCache P2P reads KV through (NIXL over UCX, L1 objects on both sides) timed by LMCache's own tool:
a server role registers an L1 buffer of source objects, a client role reads a batch of them and reports GB/s.
This module starts the server on one connection (detached, by pidfile: `lifecycle.procs`), runs one client per
batch size (`Options.counts`: a prefix of N chunks is a count of N) on another (local or SSH), stops the server,
and parses what the client printed (`parse_client_output`, tested on tests/fixtures/bench/channel/).

The client runs LMCache's tool unchanged, from a wrapper (`CLIENT_WRAPPER`) that also prints each measured read's
time, because the tool itself prints only best, median and mean: p50/p99 come from those times. On an LMCache
whose tool lacks the hook the wrapper patches, p50/p99 fall back to the median (`times_ms=None`). The wrapper
also says what LMCache's main() returned (`judge_exit`) and, with `P2P_START_AT` set, how long it waited.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence, TypeVar

from p2p_ops.connectors.base import Connector, tail
from p2p_ops.errors import BadInput, CouldNotRun
from p2p_ops.facts.logs import log_excerpt_fact, log_grep_fact, strip_ansi
from p2p_ops.facts.sections import read_fact
from p2p_ops.lifecycle import procs
from p2p_ops.observe.stats import percentile
from p2p_ops.spec.units import Proc

TOOL_MODULE = "lmcache.tools.transfer_channel_benchmark"
READY_LINE = "[server] ready"
# The server's L1 holds the largest batch plus slack for alignment; the client allocates its own.
BUFFER_SLACK = 64 << 20
SERVER_START_S = 120.0  # torch + NIXL import on a busy 2-core box
T = TypeVar("T")

CLIENT_WRAPPER = (
    "import json, sys\n"
    "from lmcache.tools.transfer_channel_benchmark import __main__ as m, benchmark as b\n"
    "_r = getattr(b, '_report', None)\n"
    "if _r:\n"
    "    def _report(cfg, times):\n"
    "        _r(cfg, times); print('[p2p] times_ms ' + json.dumps([t * 1e3 for t in times]), flush=True)\n"
    "    b._report = _report\n"
    # Concurrent clients (p2p_ops.bench.transfer_patterns) read together: each waits, once connected, for P2P_START_AT.
    "import os, time\n"
    "_at = float(os.environ.get('P2P_START_AT') or 0)\n"
    "if _at:\n"
    "    _init = b.initialize_transfer_channel_context\n"
    "    def _gated(*a, **k):\n"
    "        ctx = _init(*a, **k); get = ctx.get_transfer_channel_client\n"
    "        def client(url):\n"
    "            c = get(url); w = _at - time.time()\n"
    "            print(f'[p2p] start wait {w:.3f}', flush=True); time.sleep(max(w, 0)); return c\n"
    "        ctx.get_transfer_channel_client = client\n"
    "        return ctx\n"
    "    b.initialize_transfer_channel_context = _gated\n"
    "_rc = m.main()\n"
    "print(f'[p2p] main returned {_rc}', flush=True)\n"
    "sys.exit(_rc)\n")


@dataclass(frozen=True)
class Side:
    conn: Connector
    address: str                    # what the role binds: 127.0.0.1, or a netns testbed host's address
    python: str = sys.executable    # the interpreter with lmcache on that node
    workdir: str = ""
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Ports:
    transfer: int
    control: int
    listen: int


@dataclass(frozen=True)
class Options:
    object_size: int                # one KV chunk
    counts: Sequence[int]           # objects per read, one client run each
    page_size: int = 65536          # the fleet's l1_align_bytes, equal on both sides
    iters: int = 5
    warmup: int = 1
    verify: bool = True
    nixl_backend: str = "UCX"
    channel_type: str = "nixl"      # the transfer engine (settings.transfer_engine): nixl | mooncake_te
    timeout_s: float = 180.0

    def check(self) -> None:
        if self.page_size <= 0 or self.object_size <= 0 or self.object_size % self.page_size:
            raise BadInput(f"object size {self.object_size} must be a positive multiple of the page size "
                           f"(l1_align_bytes) {self.page_size}; round it up to a multiple")
        if not self.counts or min(self.counts) < 1:
            raise BadInput(f"counts {list(self.counts)}: give one or more object counts >= 1")
        if self.iters < 1 or self.warmup < 0:
            raise BadInput(f"iters {self.iters} / warmup {self.warmup}: iters must be >= 1, warmup >= 0")


@dataclass
class ChannelRun:
    object_size: int
    num_objects: int
    ok: bool = False
    channel_type: str = ""
    iters: int = 0
    warmup: int = 0
    best_ms: Optional[float] = None
    median_ms: Optional[float] = None
    mean_ms: Optional[float] = None
    best_gbps: Optional[float] = None
    median_gbps: Optional[float] = None
    mean_gbps: Optional[float] = None
    p50_ms: Optional[float] = None
    p99_ms: Optional[float] = None
    times_ms: Optional[list[float]] = None
    connect_s: Optional[float] = None
    verified: Optional[bool] = None
    start_wait_s: Optional[float] = None   # with a common start: how long it waited (< 0: it came late)
    main_rc: Optional[int] = None   # what LMCache's main() returned, from the wrapper's `[p2p] main returned N`
    error: str = ""
    note: str = ""                  # what went wrong that the figures do not depend on (a crash at exit)

    @property
    def payload_bytes(self) -> int:
        return self.object_size * self.num_objects

    def to_dict(self) -> dict:
        return {**asdict(self), "payload_bytes": self.payload_bytes}


def transport_env(ucx_tls: str = "", ucx_net_devices: str = "") -> dict[str, str]:
    # Empty values are left to UCX.
    env = {"LMCACHE_TRACK_USAGE": "false"}
    if ucx_tls:
        env["UCX_TLS"] = ucx_tls
    if ucx_net_devices:
        env["UCX_NET_DEVICES"] = ucx_net_devices
    return env


_STAT = re.compile(r"^\s*(best|median|mean)\s*:\s*([\d.]+)\s*ms\s+([\d.]+|inf)\s*GB/s", re.M)
_CONNECT = re.compile(r"\[client\] connected in ([\d.]+)s; reading (\d+) objects x ([\d.]+) MiB")
_ITERS = re.compile(r"iterations\s*:\s*(\d+)\s*\(warmup (\d+)\)")
_TYPE = re.compile(r"channel type\s*:\s*(\S+)")
_TIMES = re.compile(r"^\[p2p\] times_ms (\[.*\])\s*$", re.M)
_START_WAIT = re.compile(r"^\[p2p\] start wait (-?[\d.]+)\s*$", re.M)
_MAIN_RC = re.compile(r"^\[p2p\] main returned (-?\d+)\s*$", re.M)
_FAILURE = re.compile(r"^\s*(?:\w+\.)*(\w+(?:Error|Exception)): (.+)$", re.M)


def parse_client_output(text: str, verify: bool, object_size: int, num_objects: int) -> ChannelRun:
    """stdout and stderr together. ok: LMCache's report is there and, with verify, the client said `verify OK`; a
    failed run carries the last exception line the tool printed (or the output's tail) in `error`."""
    text = strip_ansi(text)
    run = ChannelRun(object_size, num_objects)
    stats = {m.group(1): (float(m.group(2)), float(m.group(3))) for m in _STAT.finditer(text)}
    for name, (ms, gbps) in stats.items():
        setattr(run, f"{name}_ms", ms)
        setattr(run, f"{name}_gbps", gbps)
    if m := _CONNECT.search(text):
        run.connect_s = float(m.group(1))
    if m := _ITERS.search(text):
        run.iters, run.warmup = int(m.group(1)), int(m.group(2))
    if m := _TYPE.search(text):
        run.channel_type = m.group(1)
    if m := _TIMES.search(text):
        run.times_ms = [round(t, 3) for t in json.loads(m.group(1))]
    if m := _START_WAIT.search(text):
        run.start_wait_s = float(m.group(1))
    if m := _MAIN_RC.search(text):
        run.main_rc = int(m.group(1))
    if run.times_ms:
        run.p50_ms, run.p99_ms = percentile(run.times_ms, 50), percentile(run.times_ms, 99)
    elif run.median_ms is not None:
        run.p50_ms = run.median_ms
    if verify:
        run.verified = "verify OK" in text and "verify FAILED" not in text
    run.ok = set(stats) == {"best", "median", "mean"} and run.verified is not False
    if not run.ok:
        failures = _FAILURE.findall(text)
        run.error = (f"{failures[-1][0]}: {failures[-1][1]}" if failures
                     else tail(text, 3) or "the client printed nothing")
    return run


def server_args(server: Side, opts: Options, ports: Ports) -> list[str]:
    sources = max(opts.counts)
    # It serves until we stop it; the timeout only bounds a server whose stop never came.
    serve_s = SERVER_START_S + opts.timeout_s * (len(opts.counts) + 1)
    return ["--role", "server", "--url", f"{server.address}:{ports.transfer}",
            "--control-url", f"{server.address}:{ports.control}", "--nixl-backend", opts.nixl_backend,
            "--transfer-channel-type", opts.channel_type,
            "--buffer-size", str(sources * opts.object_size + BUFFER_SLACK), "--page-size", str(opts.page_size),
            # The tool checks its sources against --num-objects (default 100) on the server side too.
            "--object-size", str(opts.object_size), "--num-source-objects", str(sources),
            "--num-objects", str(sources),
            "--server-timeout", str(int(serve_s))]


def client_args(server: Side, client: Side, opts: Options, ports: Ports, count: int) -> list[str]:
    args = ["--role", "client", "--url", f"{server.address}:{ports.transfer}",
            "--control-url", f"{server.address}:{ports.control}",
            "--listen-url", f"{client.address}:{ports.listen}", "--nixl-backend", opts.nixl_backend,
            "--transfer-channel-type", opts.channel_type,
            "--page-size", str(opts.page_size), "--object-size", str(opts.object_size),
            "--num-objects", str(count), "--iters", str(opts.iters), "--warmup", str(opts.warmup),
            # The client waits this long for the catalog (its default is 30 minutes): a missing server fails
            # with the tool's own "timed out fetching catalog" line instead of our timeout.
            "--server-timeout", str(int(opts.timeout_s / 2))]
    return args + (["--verify"] if opts.verify else [])


def _exports(env: Mapping[str, str]) -> str:
    return "".join(f"export {k}={shlex.quote(v)}\n" for k, v in {"LMCACHE_TRACK_USAGE": "false", **env}.items())


def server_proc(server: Side, ports: Ports) -> Proc:
    base = f"{server.workdir}/channel-server-{ports.transfer}"
    return Proc(f"channel-server:{ports.transfer}", server.workdir, base + ".sh", base + ".log", base + ".pid",
                f"--url {server.address}:{ports.transfer} ")


def client_command(server: Side, client: Side, opts: Options, ports: Ports, count: int, start_at: float = 0) -> str:
    argv = [client.python, "-c", CLIENT_WRAPPER, *client_args(server, client, opts, ports, count)]
    cd = f"mkdir -p {shlex.quote(client.workdir)} && cd {shlex.quote(client.workdir)} && " if client.workdir else ""
    env = {**client.env, **({"P2P_START_AT": f"{start_at:.3f}"} if start_at else {})}
    return f"{cd}{_exports(env).replace(chr(10), '; ')}{' '.join(shlex.quote(a) for a in argv)} 2>&1"


def start_server(server: Side, opts: Options, ports: Ports) -> Proc:
    proc = server_proc(server, ports)
    argv = " ".join(shlex.quote(a) for a in [server.python, "-m", TOOL_MODULE, *server_args(server, opts, ports)])
    with tempfile.NamedTemporaryFile("w", suffix=".sh", delete=False) as fh:
        fh.write("#!/bin/bash\n" + _exports(server.env) + f"exec {argv}\n")
    try:
        server.conn.run(f"mkdir -p {shlex.quote(server.workdir)}", timeout=30, check=True)
        server.conn.put(Path(fh.name), proc.wrapper, mode=0o700)
    finally:
        Path(fh.name).unlink(missing_ok=True)
    procs.start(server.conn, proc)
    _wait_ready(server.conn, proc, SERVER_START_S)
    return proc


def _wait_ready(conn: Connector, proc: Proc, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if read_fact(conn, log_grep_fact(proc.log, [re.escape(READY_LINE)], 1)):
            return
        if not procs.states(conn, [proc])[0].running:
            break
        time.sleep(0.3)
    excerpt = read_fact(conn, log_excerpt_fact(proc.log))
    procs.stop(conn, proc, grace_s=5)
    raise CouldNotRun(f"the transfer-channel benchmark server on {conn.host} did not get ready "
                      f"(log {proc.log}):\n{excerpt}")


def judge_exit(run: ChannelRun, exit_code: int) -> ChannelRun:
    """A client that exits non-zero fails, unless LMCache's main() had already returned 0 after a complete
    (and, with --verify, verified) report. LMCache 0.5.6's client then segfaults (139) at interpreter exit,
    after client_main's own teardown has run: every read was timed and checked before, so the figures count
    and the crash is kept as a note."""
    if exit_code == 0 or not run.ok:
        return run
    if run.main_rc == 0:
        run.note = (f"client exited {exit_code} at interpreter exit, after LMCache's main() returned 0 "
                    "(report complete and verified; a crash in native teardown, LMCache 0.5.6)")
    else:
        run.ok, run.error = False, f"client exited {exit_code} after its report, before main() returned"
    return run


def run_client(server: Side, client: Side, opts: Options, ports: Ports, count: int,
               start_at: float = 0) -> ChannelRun:
    res = client.conn.run(client_command(server, client, opts, ports, count, start_at), timeout=opts.timeout_s)
    return judge_exit(parse_client_output(res.output, opts.verify, opts.object_size, count), res.exit_code)


# Wraps one round (its count and the round itself): e.g. a rail-counter window around it.
Around = Callable[[int, Callable[[], T]], T]


def run_rounds(servers: Sequence[tuple[Side, Ports]], opts: Options, one_round: Callable[[int], T],
               around: Optional[Around] = None) -> list[T]:
    """Start the servers, run one round per count inside `around`, and stop them whatever happens."""
    opts.check()
    started: list[tuple[Side, Proc]] = []
    around = around or (lambda _n, run: run())
    try:
        for side, ports in servers:
            started.append((side, start_server(side, opts, ports)))
        return [around(n, lambda n=n: one_round(n)) for n in opts.counts]
    finally:
        for side, proc in started:
            procs.stop(side.conn, proc, grace_s=10)


def run_channel(server: Side, client: Side, opts: Options, ports: Ports,
                around: Optional[Around] = None) -> list[ChannelRun]:
    return run_rounds([(server, ports)], opts, lambda n: run_client(server, client, opts, ports, n), around)
