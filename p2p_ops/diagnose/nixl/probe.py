"""NIXL/UCX probe: a real two-process NIXL READ under a candidate environment, and what UCX chose for it.

`run_probe(ProbeOptions(env={"UCX_TLS": "tcp", "UCX_NET_DEVICES": "lo"}))` starts a target and an initiator
(`p2p_ops.diagnose.nixl.peer`) with that environment plus `UCX_LOG_LEVEL=info` and `UCX_PROTO_INFO=y`, which
make UCX log its endpoint configurations and protocol tables. The result says whether the READ worked, how many
bytes were verified, the median throughput, the transports and READ path UCX picked (parsed with
`p2p_ops.facts.ucx_trace`), and on failure the exception mapped to the catalogue's cause (`diagnose.nixl.failures`).

Two agents on one host talk intra-node (cma/shared memory) unless UCX_TLS excludes those; to exercise a NIC,
pass e.g. `UCX_TLS=rc,self` or `UCX_TLS=tcp` with `UCX_NET_DEVICES` naming it.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from p2p_ops import files
from p2p_ops.causes import Verdict
from p2p_ops.diagnose.nixl.failures import classify
from p2p_ops.errors import EXIT_BAD_INPUT, EXIT_CHECK_FAILED, EXIT_OK
from p2p_ops.facts.ucx_trace import TraceSummary, parse_traces

# Always set for the agents: the probe's transport report depends on these log lines.
PROBE_ENV = {"UCX_LOG_LEVEL": "info", "UCX_PROTO_INFO": "y"}
GRACE_S = 5.0


@dataclass
class ProbeOptions:
    env: dict[str, str] = field(default_factory=dict)
    size_bytes: int = 16 << 20
    iterations: int = 3
    timeout_s: float = 60.0
    keep_logs: Path | None = None


@dataclass
class Failure:
    side: str
    stage: str
    exc_class: str
    message: str
    cause: Verdict | None             # None: no rule recognises it
    evidence: list[str] = field(default_factory=list)


@dataclass
class ProbeResult:
    ok: bool
    env: dict[str, str]
    size_bytes: int
    iterations: int
    bytes_checked: int = 0
    seconds: list[float] = field(default_factory=list)
    throughput_gbps: float | None = None
    backend: str = ""
    ucx_version: str = ""
    transports: list[str] = field(default_factory=list)
    read_path: dict = field(default_factory=dict)
    endpoints: list[dict] = field(default_factory=list)
    failure: Failure | None = None
    logs_dir: str | None = None
    wall_s: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def exit_code(self) -> int:
        """0 the READ worked, 1 it failed, 2 it could not run here (NIXL is not installed)."""
        if self.failure and self.failure.cause and self.failure.cause.id == "nixl_missing":
            return EXIT_BAD_INPUT
        return EXIT_OK if self.ok else EXIT_CHECK_FAILED


def candidate_env(options: ProbeOptions) -> dict[str, str]:
    """What the agents run with on top of this process's environment. UCX_LOG_FILE is dropped so logs reach us."""
    return {k: v for k, v in {**options.env, **PROBE_ENV}.items() if k != "UCX_LOG_FILE"}


def _spawn(options: ProbeOptions, role: str, rdv: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "UCX_LOG_FILE"} | candidate_env(options)
    log = open(rdv / f"{role}.log", "wb")  # noqa: SIM115 - handed to the child, closed with it
    cmd = [sys.executable, "-m", "p2p_ops.diagnose.nixl.peer", role, str(rdv), "--size",
           str(options.size_bytes), "--iterations", str(options.iterations), "--timeout", str(options.timeout_s)]
    try:
        return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    finally:
        log.close()


def _wait(proc: subprocess.Popen, timeout_s: float) -> None:
    try:
        proc.wait(timeout=max(timeout_s, 0.1))
    except subprocess.TimeoutExpired:
        proc.kill()  # only the child we started, by its own handle
        proc.wait(timeout=10)


def _side_state(rdv: Path, role: str, proc: subprocess.Popen) -> dict:
    path = rdv / f"{role}.json"
    if path.exists():
        return json.loads(path.read_text())
    how = f"exit code {proc.returncode}" if proc.returncode is not None else "no exit"
    return {"role": role, "ok": False, "stage": "unknown", "exc_class": "ProcessDied",
            "message": f"{role} ended without a result ({how}); timed out or crashed"}


def explain_failure(states: dict[str, dict], trace: TraceSummary) -> Failure:
    # A target that failed first is the root cause; the initiator then only times out waiting for it.
    side = "target" if not states["target"].get("ok") and states["target"].get("stage") != "serve" else "initiator"
    state = states[side] if not states[side].get("ok") else states["target"]
    evidence = [f"{g.source} {g.level}: {g.message}" for g in trace.errors if g.level in ("FATAL", "ERROR", "WARN")][:6]
    text = f"{state.get('exc_class', '')}: {state.get('message', '')}\n" + "\n".join(evidence)
    return Failure(side, state.get("stage", ""), state.get("exc_class", ""), state.get("message", ""),
                   classify(text, f"the {side}"), evidence)


def run_probe(options: ProbeOptions) -> ProbeResult:
    started = time.monotonic()
    rdv = Path(tempfile.mkdtemp(prefix="p2p-nixl-probe-"))
    result = ProbeResult(False, candidate_env(options), options.size_bytes, options.iterations)
    try:
        target = _spawn(options, "target", rdv)
        initiator = _spawn(options, "initiator", rdv)
        _wait(initiator, options.timeout_s + GRACE_S)
        (rdv / "stop").touch()
        _wait(target, GRACE_S)
        states = {"target": _side_state(rdv, "target", target),
                  "initiator": _side_state(rdv, "initiator", initiator)}
        trace = parse_traces([(f"{role}.log", (rdv / f"{role}.log").read_text(errors="replace"))
                              for role in ("initiator", "target")])
        result.ucx_version = trace.ucx_versions[0] if trace.ucx_versions else ""
        result.transports = trace.transports
        result.endpoints = [{"process": f"{ep.host}:{ep.pid}", "name": ep.name, "kinds": ep.kinds,
                             "payload": ep.payload_class, "payload_lanes": ep.payload_lanes,
                             "emulated": ep.emulated} for ep in trace.endpoints]
        # The READ path is the initiator's peer endpoint (not its `self` one) that logged a ucp_get table.
        peers = [ep for ep in trace.endpoints if "self" not in ep.name.split()]
        reads = [ep for ep in peers if any("ucp_get" in t.operation for t in ep.tables)] or peers
        for ep in reads[:1]:
            result.read_path = {"endpoint": ep.name, "class": ep.payload_class, "lanes": ep.payload_lanes,
                                "emulated": ep.emulated, "source": ep.payload_source}
        init = states["initiator"]
        result.bytes_checked = int(init.get("bytes_checked", 0))
        result.seconds = [round(s, 6) for s in init.get("seconds", [])]
        result.backend = init.get("backend", "")
        if result.seconds:
            result.throughput_gbps = round(options.size_bytes / statistics.median(result.seconds) / 1e9, 3)
        result.ok = bool(init.get("ok")) and result.bytes_checked == options.size_bytes * options.iterations
        if not result.ok:
            result.failure = explain_failure(states, trace)
    finally:
        if options.keep_logs:
            kept = files.make_dirs(options.keep_logs)
            for path in rdv.iterdir():
                if path.suffix in (".log", ".json"):
                    files.write_bytes(kept / path.name, files.read_bytes(path, tail=True))
            result.logs_dir = str(options.keep_logs)
        shutil.rmtree(rdv, ignore_errors=True)
        result.wall_s = round(time.monotonic() - started, 3)
    return result


def agent_lanes(env: dict[str, str] | None = None, timeout_s: float = 30.0) -> list[str] | None:
    """Lanes UCX (as bundled with NIXL) would use here, from one agent's INFO log; None if NIXL cannot start."""
    rdv = Path(tempfile.mkdtemp(prefix="p2p-nixl-solo-"))
    try:
        proc = _spawn(ProbeOptions(env=env or {}, timeout_s=timeout_s), "solo", rdv)
        _wait(proc, timeout_s)
        trace = parse_traces([("solo.log", (rdv / "solo.log").read_text(errors="replace"))])
        return sorted({lane for ep in trace.endpoints for lane in ep.lanes}) or None
    finally:
        shutil.rmtree(rdv, ignore_errors=True)
