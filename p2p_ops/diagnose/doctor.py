"""Fleet doctor (`p2pctl doctor`): is this fleet able to share, and if not, which peer is wrong and how to fix it.

Two halves, so the judgement is testable without a fleet:

- `gather(ctx)` reads the fleet (impure, bounded): every instance's env.sh, the state and environment of each
  server process (`consistency.process_env`), its `/proc/<pid>/limits`, `/status`, `/config`, `/lmc_version`,
  the `Computed NONE_HASH=` line of its log, the coordinator's `/healthz` and `/instances`, package versions from
  each node's interpreter, listening sockets, RDMA device count, and TCP connects from every node to every
  advertised P2P URL, mq port and the coordinator (through each node's connector, so over SSH too).
- `check(facts)` is pure and turns `FleetFacts` into a `findings.Report`: settings that must agree across
  peers, coordinator membership, reachability, ports (free before launch, listening after), memlock, UCX_TLS.

A stopped fleet gets the pre-launch checks (env.sh agreement, ports free). Exit codes come from the report:
0 healthy, 1 findings, 2 could not check. Add a check: a `_check_*` function over `FleetFacts`, called in
`check`, with a unit test on hand-built facts.
"""

from __future__ import annotations

import ipaddress
import json
import re
import shlex
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from p2p_ops import consistency, probes, procs
from p2p_ops.diagnose.findings import Report
from p2p_ops.facts.limits import parse_proc_limits
from p2p_ops.layout import COORDINATOR
from p2p_ops.nodeprobe.parsers import parse_listeners
from p2p_ops.redact import redact_text
from p2p_ops.render import bin_dir_for, render_fleet

# Read from the server's process environment (never the whole environment: it may hold secrets).
SERVER_ENV_KEYS = ("PYTHONHASHSEED", "LMCACHE_CHUNK_SIZE", "LMCACHE_HASH_ALGORITHM", "LMCACHE_L1_ALIGN_BYTES",
                   "LMCACHE_P2P_TRANSFER_ENGINE", "P2P_MODEL", "LMCACHE_COORDINATOR_URL",
                   "LMCACHE_P2P_ADVERTISE_URL", "UCX_TLS", "UCX_NET_DEVICES", "UCX_MAX_RMA_RAILS")
PACKAGES = ("lmcache", "nixl", "nixl-cu12", "nixl-cu13", "torch", "vllm")
REACH_TIMEOUT_S = 3

# Key -> fix, for every value that must be identical on every peer.
AGREE_FIXES = {
    "PYTHONHASHSEED": consistency.FIXES["PYTHONHASHSEED"],
    "chunk_size": consistency.FIXES["chunk_size"],
    "hash_algorithm": consistency.FIXES["hash_algorithm"],
    "l1_align_bytes": consistency.FIXES["LMCACHE_L1_ALIGN_BYTES"],
    "transfer_engine": consistency.FIXES["LMCACHE_P2P_TRANSFER_ENGINE"],
    "model": consistency.FIXES["P2P_MODEL"],
    "world_size": "run every engine with the same tensor-parallel size (world size is part of every cache key)",
    "lmcache_version": "install one lmcache version on every node (`pip install lmcache==<v>`); P2P RPC payloads "
                       "are not compatible across versions",
    "nixl_version": "install one nixl version on every node (`pip install nixl==<v> nixl-cu12==<v>`)",
    "NONE_HASH": "the hash chain starts differently on these servers: make PYTHONHASHSEED, hash_algorithm and "
                 "the vLLM version identical, then restart every server",
    "engine_model": consistency.FIXES["P2P_ENGINE_MODEL_SEED"],
    "UCX_TLS": "use one settings.ucx_tls for the fleet (peers must share a transport), re-render, restart",
}
_HOST_TLS = {"tcp", "rc", "rc_v", "rc_x", "rc_mlx5", "rc_verbs", "ud", "ud_v", "ud_x", "ud_mlx5", "ud_verbs", "dc",
             "dc_x", "dc_mlx5", "ib", "sm", "shm", "posix", "sysv", "cma", "knem", "xpmem", "all"}
_NET_TLS = {"tcp", "rc", "rc_v", "rc_x", "rc_mlx5", "rc_verbs", "ud", "ud_v", "ud_x", "ud_mlx5", "ud_verbs", "dc",
            "dc_x", "dc_mlx5", "ib", "all"}
_RDMA_TLS = _NET_TLS - {"tcp", "all"}
_CUDA_TLS = {"cuda", "cuda_copy", "cuda_ipc", "gdr_copy"}


# ---- facts -----------------------------------------------------------------------------------------------

@dataclass
class InstanceFacts:
    instance: str
    node: str
    address: str
    env_file: Optional[dict[str, str]] = None      # parsed env.sh; None: no file
    env_file_rendered: bool = False                # env_file is the spec's rendering (no env.sh on disk)
    server_state: str = "unknown"                  # running | dead | stale | none | unknown
    engine_state: str = "unknown"
    pid: Optional[int] = None
    process_env: dict[str, Optional[str]] = field(default_factory=dict)
    engine_env: dict[str, Optional[str]] = field(default_factory=dict)
    memlock: Optional[dict] = None                 # facts.limits.Memlock as a dict
    status: Optional[dict] = None                  # raw /status; None: no answer
    config: Optional[dict] = None                  # raw /config
    lmc_version: Optional[str] = None
    none_hash: Optional[str] = None
    # The algorithm LMCache could not load from vLLM ("Could not load 'builtin' from vLLM. Using builtin hash"):
    # the server really hashes with Python's hash(), whatever its settings say.
    hash_fallback: Optional[str] = None

    @property
    def running(self) -> bool:
        return self.server_state == "running"


@dataclass
class Reach:
    source: str            # node name the connect ran on
    target: str            # e.g. "node-b-0 p2p"
    host: str
    port: int
    ok: bool


@dataclass
class PlannedPort:
    node: str
    port: int
    role: str              # e.g. "node-a-0 http"
    bind: str
    owner: str             # process name whose port it is, e.g. "node-a-0/server"


@dataclass
class NodeFacts:
    node: str
    address: str
    error: Optional[str] = None
    packages: dict[str, Optional[str]] = field(default_factory=dict)
    rdma_devices: Optional[int] = None
    listeners: list[tuple[str, int, str, Optional[int]]] = field(default_factory=list)
    reach: list[Reach] = field(default_factory=list)
    # pid -> session id of every process on the node; a fleet process leads its own session (setsid), so a
    # listener belongs to the fleet when its pid's session is one of the fleet's pids (children included).
    sessions: dict[int, int] = field(default_factory=dict)
    fleet_pids: dict[int, str] = field(default_factory=dict)   # session leader pid -> process name
    bind_ok: tuple[str, ...] = ()                                # addresses a fleet process may listen on


@dataclass
class FleetFacts:
    fleet: str
    runtime: str
    coordinator_url: str
    coordinator_node: str
    coordinator_state: str = "unknown"
    coordinator_env: Optional[dict[str, str]] = None
    coordinator_healthy: bool = False
    coordinator_instances: Optional[list[dict]] = None
    instances: list[InstanceFacts] = field(default_factory=list)
    nodes: list[NodeFacts] = field(default_factory=list)
    ports: list[PlannedPort] = field(default_factory=list)
    proc_states: dict[str, str] = field(default_factory=dict)

    @property
    def multi_host(self) -> bool:
        return len({n.address for n in self.nodes}) > 1

    @property
    def any_running(self) -> bool:
        return self.coordinator_state == "running" or any(i.running for i in self.instances)

    def node(self, name: str) -> Optional[NodeFacts]:
        return next((n for n in self.nodes if n.node == name), None)

    def to_dict(self) -> dict:
        return asdict(self)


# ---- pure helpers ----------------------------------------------------------------------------------------

_ASSIGN = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")


def parse_env_sh(text: str) -> dict[str, str]:
    """`export KEY=VALUE` lines (shell-quoted values unquoted); a later assignment wins, like in bash."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        m = _ASSIGN.match(line)
        if not m:
            continue
        try:
            parts = shlex.split(m[2], comments=True)
            out[m[1]] = parts[0] if parts else ""
        except ValueError:
            out[m[1]] = m[2].strip()
    return out


_KEEP_ENV = re.compile(r"^(PYTHONHASHSEED|LMCACHE_|P2P_|UCX_|NIXL_)")


def safe_env(env: dict[str, str]) -> dict[str, str]:
    """Only the variables the checks read, and none whose name or value looks like a credential: the doctor's
    JSON goes into reports and bundles."""
    return {k: v for k, v in env.items() if _KEEP_ENV.match(k) and not redact_text(f"{k}={v}").redactions}


def context_meta(status: Optional[dict]) -> list[dict]:
    """Engine registrations from /status: `cache_context_meta` (0.5.6), `gpu_context_meta` (docs) and
    `non_cuda_context_meta` (CPU engines), each `{id: {model_name, world_size, ...}}`."""
    if not isinstance(status, dict):
        return []
    out = []
    for key in ("cache_context_meta", "gpu_context_meta", "non_cuda_context_meta"):
        section = status.get(key)
        if isinstance(section, dict):
            out += [v for v in section.values() if isinstance(v, dict)]
    return out


def config_align_bytes(config: Optional[dict]) -> Optional[str]:
    if not isinstance(config, dict):
        return None
    sm = config.get("storage_manager") or {}
    cfgs = list(sm.get("l1_manager_configs") or []) + [sm.get("l1_manager_config") or {}]
    mp = config.get("mp") or {}
    cfgs += list(mp.get("l1_manager_configs") or [])
    for c in cfgs:
        align = ((c or {}).get("memory_config") or {}).get("align_bytes")
        if align is not None:
            return str(align)
    return None


def _first(*candidates: tuple[Optional[object], str]) -> Optional[tuple[str, str]]:
    for value, source in candidates:
        if value is not None and value != "":
            return str(value), source
    return None


def observed(inst: InstanceFacts, packages: dict[str, Optional[str]]) -> dict[str, tuple[str, str]]:
    """What one instance uses for each must-agree key: (value, where it was read), best source first."""
    pe, ef, st = inst.process_env, inst.env_file or {}, inst.status or {}
    envsrc = "spec (not rendered)" if inst.env_file_rendered else "env.sh"
    cfg_engine = ((inst.config or {}).get("mp") or {}).get("p2p_config", {}).get("transfer_engine") \
        if isinstance(inst.config, dict) else None
    metas = context_meta(inst.status)
    models = ",".join(sorted({str(m.get("model_name")) for m in metas if m.get("model_name")})) or None
    worlds = ",".join(sorted({str(m.get("world_size")) for m in metas if m.get("world_size") is not None})) or None
    candidates = {
        "PYTHONHASHSEED": [(pe.get("PYTHONHASHSEED"), "process"), (ef.get("PYTHONHASHSEED"), envsrc)],
        "chunk_size": [(st.get("chunk_size"), "/status"), (pe.get("LMCACHE_CHUNK_SIZE"), "process"),
                       (ef.get("LMCACHE_CHUNK_SIZE"), envsrc)],
        "hash_algorithm": [(st.get("hash_algorithm"), "/status"), (pe.get("LMCACHE_HASH_ALGORITHM"), "process"),
                           (ef.get("LMCACHE_HASH_ALGORITHM"), envsrc)],
        "l1_align_bytes": [(config_align_bytes(inst.config), "/config"),
                           (pe.get("LMCACHE_L1_ALIGN_BYTES"), "process"), (ef.get("LMCACHE_L1_ALIGN_BYTES"), envsrc)],
        "transfer_engine": [(cfg_engine, "/config"), (pe.get("LMCACHE_P2P_TRANSFER_ENGINE"), "process"),
                            (ef.get("LMCACHE_P2P_TRANSFER_ENGINE"), envsrc)],
        "model": [(models, "/status context meta"), (pe.get("P2P_MODEL"), "process"), (ef.get("P2P_MODEL"), envsrc)],
        "world_size": [(worlds, "/status context meta")],
        "lmcache_version": [(inst.lmc_version, "/lmc_version"), (packages.get("lmcache"), "node python")],
        "nixl_version": [(packages.get("nixl") or packages.get("nixl-cu12") or packages.get("nixl-cu13"),
                          "node python")],
        "NONE_HASH": [(inst.none_hash, "server.log")],
        "engine_model": [(_engine_model(inst.engine_env), "engine process"), (_engine_model(ef), envsrc)],
    }
    out = {}
    for key, cands in candidates.items():
        got = _first(*cands)
        if got:
            out[key] = got
    tls = pe.get("UCX_TLS") if inst.running and pe else ef.get("UCX_TLS")
    out["UCX_TLS"] = (tls or "(unset)", "process" if inst.running and pe else envsrc)
    return out


def _engine_model(env: dict) -> Optional[str]:
    keys = ("P2P_ENGINE_MODEL_SEED", "P2P_ENGINE_NUM_LAYERS", "P2P_ENGINE_NUM_HEADS", "P2P_ENGINE_HEAD_SIZE")
    if not env or all(env.get(k) is None for k in keys):
        return None
    return "seed={} layers={} heads={} head_size={}".format(*(env.get(k) for k in keys))


def _names(values: dict[str, object]) -> str:
    return ", ".join(sorted(values))


def _shown(values: dict[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(values.items()))


# ---- checks ----------------------------------------------------------------------------------------------

def _vllm_anywhere(facts: FleetFacts) -> bool:
    return facts.runtime == "vllm" or any(n.packages.get("vllm") for n in facts.nodes)


def _seed_mismatch_severity(facts: FleetFacts, per_inst: dict[str, dict]) -> tuple[str, str]:
    """How bad differing PYTHONHASHSEEDs are, judged by what each instance really runs, not by the spec."""
    real = {name: obs.get("hash_algorithm", ("blake3", ""))[0] for name, obs in per_inst.items()}
    fallback = sorted(i.instance for i in facts.instances if i.hash_fallback)
    if facts.runtime != "vllm" and not fallback and all(alg == "blake3" for alg in real.values()):
        return "warn", (" Harmless today: every instance hashes with blake3 (" + _shown(real) + "), which does "
                        "not use PYTHONHASHSEED; keep them equal anyway, other hash algorithms depend on it.")
    why = (f" {', '.join(fallback)} hash(es) with Python's builtin hash (LMCache could not load the algorithm from "
           "vLLM)" if fallback else f" hash algorithms in use: {_shown(real)}")
    return "error", (f"{why}: every chunk hash depends on the seed, so these peers share nothing (zero cached "
                     "tokens, no error).")


def _check_hash_fallback(report: Report, facts: FleetFacts) -> None:
    """LMCache's own log says it fell back to Python's hash(): on Python < 3.12 hash(None) is an address, so
    NONE_HASH (and every chunk key) differs per process even with equal PYTHONHASHSEEDs."""
    fell = {i.instance: i.hash_fallback for i in facts.instances if i.hash_fallback}
    if fell:
        report.add("error", "hash:builtin_fallback", _names(fell), _shown(fell),
                   "LMCache logged \"Could not load '<algorithm>' from vLLM. Using builtin hash\": these servers hash "
                   "with Python's hash(), whose NONE_HASH differs per process even with equal PYTHONHASHSEED, so "
                   "they share nothing",
                   "set settings.hash_algorithm: blake3 (only runtime: vllm may use builtin/sha256_cbor), "
                   "re-render and restart")


def _check_agreement(report: Report, facts: FleetFacts) -> None:
    per_inst = {i.instance: observed(i, (facts.node(i.node) or NodeFacts(i.node, i.address)).packages)
                for i in facts.instances}
    keys = [k for k in AGREE_FIXES if any(k in v for v in per_inst.values())]
    agreed: dict[str, str] = {}
    for key in keys:
        values = {inst: obs[key][0] for inst, obs in per_inst.items() if key in obs}
        if key in ("chunk_size", "hash_algorithm") and facts.coordinator_env:
            cval = facts.coordinator_env.get("LMCACHE_MP_COORDINATOR_" + key.upper())
            if cval:
                values[COORDINATOR] = cval
        if len(set(values.values())) <= 1:
            if values:
                agreed[key] = next(iter(values.values()))
            continue
        sources = sorted({obs[key][1] for obs in per_inst.values() if key in obs})
        severity, note = "error", ""
        if key == "PYTHONHASHSEED":
            severity, note = _seed_mismatch_severity(facts, per_inst)
        elif key in ("nixl_version", "UCX_TLS"):
            severity = "warn"
        report.add(severity, f"agree:{key}", _names(values), _shown(values),
                   f"{key} differs across peers (read from {', '.join(sources)}).{note}", AGREE_FIXES[key])
    report.facts["agreed"] = agreed
    _check_stale_env(report, facts)


def _check_stale_env(report: Report, facts: FleetFacts) -> None:
    """env.sh edited after the server started: the running process still uses the old value."""
    for inst in facts.instances:
        if not inst.running or not inst.process_env or not inst.env_file or inst.env_file_rendered:
            continue
        for key, live in inst.process_env.items():
            on_disk = inst.env_file.get(key)
            if live is not None and on_disk is not None and live != on_disk:
                report.add("warn", "stale_env", inst.instance, f"process {key}={live}, env.sh {key}={on_disk}",
                           f"env.sh changed after {inst.instance}'s server started; the running server uses the "
                           "old value", f"restart {inst.instance} (`p2pctl down` then `p2pctl up --no-render`) "
                           "or revert the edit")


def _check_coordinator(report: Report, facts: FleetFacts) -> None:
    running = [i for i in facts.instances if i.running]
    if not facts.coordinator_healthy:
        if facts.coordinator_state == "running":
            msg = f"the coordinator process runs but {facts.coordinator_url}/healthz does not answer healthy"
        elif running:
            msg = (f"the coordinator is not running (process {facts.coordinator_state}): servers cannot register "
                   "or discover peers; each drops its peer adapters after 4 missed polls")
        else:
            msg = None
        if msg:
            report.add("error", "coordinator", "coordinator", f"{facts.coordinator_url} process "
                       f"{facts.coordinator_state}", msg, "start it again with `p2pctl up --no-render` (it only "
                       "starts what is not running) and read coordinator/coordinator.log")
    for inst in running:
        url = inst.process_env.get("LMCACHE_COORDINATOR_URL") or (inst.env_file or {}).get("LMCACHE_COORDINATOR_URL")
        if url and url.rstrip("/") != facts.coordinator_url.rstrip("/"):
            report.add("error", "coordinator_url", inst.instance,
                       f"{inst.instance}={url}, fleet={facts.coordinator_url}",
                       f"{inst.instance}'s server talks to {url}, not to the fleet's coordinator: it registers "
                       "nowhere (or in another fleet) and sees no peers",
                       f"set LMCACHE_COORDINATOR_URL={facts.coordinator_url} (re-render with `p2pctl render`) and "
                       f"restart {inst.instance}")
    if facts.coordinator_healthy:
        _check_membership(report, facts, running)
    for inst in running:
        if inst.status is None:
            report.add("error", "server_http", inst.instance, "no answer",
                       f"{inst.instance}'s server process runs but does not answer /status",
                       f"read {inst.instance}/server.log; the HTTP port may be taken or the server is stuck")
            continue
        state = inst.status.get("p2p_state", "unknown")
        peers = inst.status.get("p2p_peer_count")
        if state != "registered":
            report.add("error", "p2p_state", inst.instance, f"p2p_state={state}",
                       f"{inst.instance} is {state}: its last GET /instances failed or did not list itself, so it "
                       "has no peers", "check the coordinator (finding above) and LMCACHE_COORDINATOR_URL; grep its "
                       "server.log for 'P2P instance discovery failed' and 'Coordinator registration/heartbeat "
                       "failed'")
        elif isinstance(peers, int) and peers != len(running) - 1:
            report.add("warn", "peer_count", inst.instance, f"{peers} peer(s) {inst.status.get('p2p_peers')}",
                       f"{inst.instance} sees {peers} peer(s), {len(running) - 1} other server(s) are running",
                       "wait one poll interval; a peer missing for longer is not registered (see its findings)")


def _check_membership(report: Report, facts: FleetFacts, running: list[InstanceFacts]) -> None:
    listed = {str(e.get("instance_id")): e for e in facts.coordinator_instances or []}
    known = {i.instance for i in facts.instances}
    for inst in running:
        entry = listed.get(inst.instance)
        if entry is None:
            report.add("error", "registration", inst.instance, "absent from /instances",
                       f"{inst.instance}'s server runs but the coordinator does not list it: peers cannot find it",
                       "check its LMCACHE_COORDINATOR_URL and that it reaches the coordinator; its server.log "
                       "shows 'Coordinator registration/heartbeat failed' with the reason")
            continue
        want = inst.process_env.get("LMCACHE_P2P_ADVERTISE_URL") or (inst.env_file or {}).get(
            "LMCACHE_P2P_ADVERTISE_URL")
        got = entry.get("p2p_advertised_url") or ""
        if not got or not entry.get("mq_port"):
            report.add("error", "registration", inst.instance, f"p2p_advertised_url={got!r} mq_port="
                       f"{entry.get('mq_port')}", f"{inst.instance} registered without a P2P URL or mq port: "
                       "peers skip it", "start the server with --p2p-advertise-url (LMCACHE_P2P_ADVERTISE_URL)")
        elif want and got != want:
            report.add("error", "registration", inst.instance, f"advertised {got}, env {want}",
                       f"{inst.instance} advertises {got} but is configured for {want}",
                       "restart the server so it registers its current URL")
    for iid in sorted(set(listed) - known):
        report.add("warn", "registration", iid, listed[iid].get("p2p_advertised_url"),
                   f"the coordinator lists {iid}, which is not in this fleet (a stale entry, or another fleet "
                   "shares this coordinator)", "give each fleet its own coordinator port; stale entries leave "
                   "after --instance-timeout (30 s)")


def _check_reach(report: Report, facts: FleetFacts) -> None:
    for node in facts.nodes:
        for r in node.reach:
            if not r.ok:
                report.add("error", "reach", f"{r.source} -> {r.target}", f"{r.host}:{r.port}",
                           f"node {r.source} cannot open a TCP connection to {r.target} at {r.host}:{r.port}",
                           "bind the server to an address peers can reach (node.bind / --host), open the port in "
                           "the firewall, and check the advertised address")


def wide_binds(node: NodeFacts) -> list[tuple[str, str, int, Optional[int]]]:
    """(process name, address, port, pid) of each fleet listener bound wider than the node allows."""
    out = []
    for address, port, _, pid in node.listeners:
        if pid is None:
            continue  # /proc/net/tcp fallback or another user's socket: cannot be attributed
        owner = node.fleet_pids.get(node.sessions.get(pid, -1)) or node.fleet_pids.get(pid)
        if owner is None or _bind_allowed(address, node.bind_ok):
            continue
        out.append((owner, address, port, pid))
    return out


def _bind_allowed(address: str, allowed: tuple[str, ...]) -> bool:
    host = address.strip("[]").split("%", 1)[0]
    if host in allowed:
        return True
    try:
        return "loopback" in allowed and ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # "*" and names: every interface


def _check_binds(report: Report, facts: FleetFacts) -> None:
    """Loopback means loopback: a fleet process listening on 0.0.0.0, eth0 or another interface is named."""
    for node in facts.nodes:
        if node.error:
            continue
        for owner, address, port, pid in wide_binds(node):
            planned = any(p.node == node.node and p.port == port for p in facts.ports)
            scope = "127.0.0.0/8" if node.bind_ok == ("loopback",) else f"{node.address} (and loopback)"
            fix = ("set the node's bind (or coordinator.host / prometheus.host) to its address and re-render"
                   if planned else
                   "a listener on a random port is UCX's (NIXL transfer channel): set settings.ucx_net_devices "
                   "to the interface of the node's address (lo for a local fleet), re-render and restart")
            report.add("error", "bind:wide", f"{owner} on {node.node}", f"{address}:{port} (pid {pid})",
                       f"{owner} listens on {address}:{port}, outside {scope}", fix)


def _check_ports(report: Report, facts: FleetFacts) -> None:
    by_node = {n.node: n for n in facts.nodes}
    before = len(report.problems)
    for p in facts.ports:
        node = by_node.get(p.node)
        if node is None or node.error:
            continue
        holders = [ln for ln in node.listeners if ln[1] == p.port and
                   (ln[0] in (p.bind, "*", "0.0.0.0", "::", "[::]") or p.bind in ("0.0.0.0", "*"))]
        owner_running = facts.proc_states.get(p.owner) == "running"
        if owner_running and not holders:
            report.add("error", "port_listening", p.role,
                       f"{p.bind}:{p.port}", f"{p.owner} runs but nothing listens on {p.bind}:{p.port} ({p.role})",
                       f"read {p.owner}.log: the process may still be starting, or it failed to bind")
        elif not owner_running and holders:
            who = holders[0][2] or "another process"
            pid = f" pid {holders[0][3]}" if holders[0][3] else ""
            report.add("error", "port_busy", p.role, f"{p.bind}:{p.port} held by {who}{pid}",
                       f"port {p.port} ({p.role}) on {p.node} is taken while {p.owner} is not running: it will "
                       "fail to start", "stop what holds it, or pick another port in fleet.yaml and re-render")
    if not facts.any_running and len(report.problems) == before and facts.ports:
        report.add("info", "ports", "fleet", f"{len(facts.ports)} ports", "every planned port is free on its node")


def _check_memlock(report: Report, facts: FleetFacts) -> None:
    for inst in facts.instances:
        m = inst.memlock
        if not inst.running or not m or m.get("error") or m.get("soft") is None:
            continue
        node = facts.node(inst.node)
        tls = set(_tls_tokens(observed(inst, {})["UCX_TLS"][0]))
        rdma = bool(node and node.rdma_devices) or bool(tls & _RDMA_TLS)
        soft = m["soft"]
        if rdma:
            report.add("error", "memlock", inst.instance, f"{soft} bytes ({m.get('source')})",
                       f"{inst.instance}'s server may lock only {soft} bytes: RDMA memory registration of its L1 "
                       "fails (ibv_reg_mr / ibv_create_cq: Cannot allocate memory)",
                       "start the server with unlimited locked memory: `ulimit -l unlimited` (needs the hard "
                       "limit), LimitMEMLOCK=infinity (systemd), --ulimit memlock=-1 (Docker)")
        else:
            report.add("info", "memlock", inst.instance, f"{soft} bytes ({m.get('source')})",
                       "memlock is limited; fine for TCP/shared memory, RDMA registration would need it unlimited")


def _tls_tokens(value: str) -> list[str]:
    return [t.strip() for t in value.split(",") if t.strip()] if value and value != "(unset)" else []


def _check_ucx_tls(report: Report, facts: FleetFacts) -> None:
    for inst in facts.instances:
        value = observed(inst, {})["UCX_TLS"][0]
        tokens = _tls_tokens(value)
        if not tokens:
            continue
        node = facts.node(inst.node)
        subject, seen = inst.instance, f"UCX_TLS={value}"
        if any("^" in t for t in tokens[1:]) or "^" in tokens[0].lstrip("^") or tokens[0].startswith("^^"):
            report.add("error", "ucx_tls", subject, seen, "'^' may only appear as the first character of "
                       "UCX_TLS (NIXL refuses it: NIXL_ERR_BACKEND)", "write a deny-list as ^a,b or an allow-list")
            continue
        if tokens[0].startswith("^"):
            denied = {tokens[0][1:], *tokens[1:]}
            if facts.multi_host and "tcp" in denied and not (node and node.rdma_devices):
                report.add("error", "ucx_tls", subject, seen, "UCX_TLS denies tcp on a node without RDMA: no "
                           "transport is left between hosts", "drop ^tcp, or give the node an RDMA NIC")
            continue
        names = {t.lower() for t in tokens}
        if not names & _HOST_TLS:
            report.add("error", "ucx_tls", subject, seen, "UCX_TLS lists only GPU transports, but LMCache's L1 is "
                       "host DRAM: NIXL fails with NIXL_ERR_BACKEND ('transports cuda_ipc,cuda_copy are not "
                       "available')", "use UCX_TLS=rc,sm,self on RDMA fabrics or tcp,sm,self without RDMA "
                       "(or leave it unset)")
            continue
        if facts.multi_host and not names & _NET_TLS:
            report.add("error", "ucx_tls", subject, seen, "UCX_TLS has no network transport (tcp, rc, ud, dc): "
                       "peers on other hosts cannot be reached", "add rc (RDMA) or tcp")
        elif names & _NET_TLS and not names & {"tcp", "all"} and node is not None and node.rdma_devices == 0:
            report.add("error", "ucx_tls", subject, seen, f"UCX_TLS asks for RDMA transports but node "
                       f"{inst.node} has no RDMA device", "add tcp, or fix the RDMA stack (`p2pctl rdma`)")
        if names & _CUDA_TLS:
            report.add("warn", "ucx_tls", subject, seen, "UCX_TLS lists CUDA transports; L1 is host DRAM so they "
                       "carry nothing, and cuda_copy alone lowers throughput (openucx/ucx#11652)",
                       "drop cuda_copy/cuda_ipc: rc,sm,self (RDMA) or tcp,sm,self")


def _check_processes(report: Report, facts: FleetFacts) -> None:
    if not facts.any_running:
        return
    for inst in facts.instances:
        if inst.server_state in ("dead", "stale"):
            report.add("error", "process", f"{inst.instance}/server", inst.server_state,
                       f"{inst.instance}'s server is {inst.server_state} while the fleet runs",
                       f"read {inst.instance}/server.log (`p2pctl diagnose 'server exits with NIXL_ERR_BACKEND'`), "
                       "then `p2pctl up --no-render`")


def check(facts: FleetFacts) -> Report:
    """Judge gathered facts (pure). A stopped fleet gets the pre-launch subset."""
    mode = "running" if facts.any_running else "stopped (pre-launch checks)"
    report = Report(f"fleet doctor: {facts.fleet} ({mode})")
    reachable = [n for n in facts.nodes if not n.error]
    for n in facts.nodes:
        if n.error:
            report.add("error", "node", n.node, n.address, f"cannot read node {n.node}: {n.error}",
                       "check the connection (`p2pctl probe`)")
    if facts.nodes and not reachable:
        report.could_not_check = "no node could be read"
        return report
    for inst in facts.instances:
        if inst.env_file_rendered:
            report.add("info", "env_file", inst.instance, "missing", "no env.sh yet; compared the spec's rendering",
                       "`p2pctl render` (or `p2pctl up`) writes it")
    _check_agreement(report, facts)
    _check_hash_fallback(report, facts)
    _check_ports(report, facts)
    _check_binds(report, facts)
    _check_ucx_tls(report, facts)
    if facts.any_running:
        _check_processes(report, facts)
        _check_coordinator(report, facts)
        _check_reach(report, facts)
        _check_memlock(report, facts)
    report.facts["mode"] = mode
    report.facts["instances"] = {i.instance: {k: v for k, (v, _) in observed(
        i, (facts.node(i.node) or NodeFacts(i.node, i.address)).packages).items()} | {
        "server": i.server_state, "p2p_state": (i.status or {}).get("p2p_state")} for i in facts.instances}
    return report


# ---- gathering (impure, bounded) -------------------------------------------------------------------------

_PY_VERSIONS = """
import json
from importlib import metadata
out = {}
for n in %r:
    try:
        out[n] = metadata.version(n)
    except metadata.PackageNotFoundError:
        out[n] = None
print(json.dumps(out))
""" % (PACKAGES,)
_MARK = "@@P2P-DOCTOR"


def _section(name: str, body: str) -> str:
    return f"printf '\\n{_MARK} %s\\n' {shlex.quote(name)}\n{{\n{body}\n}} 2>/dev/null\n"


def node_script(python: str, files: dict[str, str], logs: dict[str, str], pids: dict[str, int],
                targets: list[tuple[str, str, int]]) -> str:
    """One bash round trip per node. files: label -> path to cat; logs: label -> server log (NONE_HASH line);
    pids: label -> pid whose limits to read; targets: (label, host, port) to TCP-connect to."""
    q = shlex.quote
    parts = [
        _section("packages", f"{q(python)} - <<'P2P_PY'\n{_PY_VERSIONS}\nP2P_PY"),
        _section("rdma", "ls /sys/class/infiniband 2>/dev/null | wc -l"),
        _section("listeners", "ss -Htlnp 2>/dev/null || cat /proc/net/tcp /proc/net/tcp6"),
        _section("sessions", "ps -eo pid=,sid= 2>/dev/null"),
    ]
    for label, path in files.items():
        parts.append(_section(f"file {label}", f"cat {q(path)}"))
    for label, path in logs.items():
        parts.append(_section(f"nonehash {label}",
                              f"grep -a -m1 'Computed NONE_HASH=' {q(path)} | sed 's/\\x1b\\[[0-9;]*m//g'"))
        parts.append(_section(f"hashfallback {label}",
                              f"grep -a -m1 \"Could not load '.*' from vLLM\" {q(path)} | sed 's/\\x1b\\[[0-9;]*m//g'"))
    for label, pid in pids.items():
        parts.append(_section(f"limits {label}", f"cat /proc/{int(pid)}/limits"))
    probes_sh = [f"( if timeout {REACH_TIMEOUT_S} bash -c {q(f'</dev/tcp/{h}/{p}')}; "
                 f"then echo {q(f'ok {h} {p} {lab}')}; else echo {q(f'fail {h} {p} {lab}')}; fi ) &"
                 for lab, h, p in targets]
    parts.append(_section("reach", "\n".join(probes_sh + ["wait"])))
    return "\n".join(parts)


def parse_node_output(text: str) -> dict[str, str]:
    sections: dict[str, str] = {}
    current = None
    for line in text.splitlines():
        if line.startswith(_MARK + " "):
            current = line[len(_MARK) + 1:]
            sections[current] = ""
        elif current is not None:
            sections[current] += line + "\n"
    return {k: v.strip("\n") for k, v in sections.items()}


def parse_sessions(text: str) -> dict[int, int]:
    """`ps -eo pid=,sid=` -> {pid: sid}."""
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
            out[int(parts[0])] = int(parts[1])
    return out


def hash_fallback(text: str) -> Optional[str]:
    """The algorithm named by LMCache's "Could not load 'X' from vLLM. Using builtin hash" line, if any."""
    m = re.search(r"Could not load '([^']*)' from vLLM", text)
    return m[1] if m else None


def _none_hash(line: str) -> Optional[str]:
    m = re.search(r"Computed NONE_HASH=(.*?) using", line)
    return m[1] if m else None


def planned_ports(ctx) -> list[PlannedPort]:
    fleet = ctx.fleet
    cnode = fleet.coordinator_node()
    out = [PlannedPort(cnode.name, fleet.coordinator.port, "coordinator", fleet.coordinator.host,
                       ctx.coordinator_proc().name)]
    for node, inst in fleet.instances():
        for kind in ("mp", "http", "p2p"):
            out.append(PlannedPort(node.name, getattr(inst.ports, kind), f"{inst.id} {kind}", node.bind_host,
                                   ctx.server_proc(node, inst).name))
        out.append(PlannedPort(node.name, inst.ports.engine, f"{inst.id} engine", node.bind_host,
                               ctx.engine_proc(node, inst).name))
    return out


def _reach_targets(ctx, facts: FleetFacts) -> list[tuple[str, str, int]]:
    """(label, host, port) of everything peers connect to; only where the owner runs."""
    targets: dict[tuple[str, int], str] = {}
    fleet = ctx.fleet
    if facts.coordinator_state == "running":
        targets[(fleet.coordinator.host, fleet.coordinator.port)] = "coordinator"
    for node, inst in fleet.instances():
        if facts.proc_states.get(ctx.server_proc(node, inst).name) == "running":
            targets[(node.address, inst.ports.p2p)] = f"{inst.id} p2p"
            targets[(node.address, inst.ports.mp)] = f"{inst.id} mq"
    for e in facts.coordinator_instances or []:
        url, ip, mq = e.get("p2p_advertised_url") or "", e.get("ip"), e.get("mq_port")
        host, _, port = url.rpartition(":")
        if host and port.isdigit():
            targets.setdefault((host, int(port)), f"{e.get('instance_id')} p2p (advertised)")
        if ip and mq:
            targets.setdefault((str(ip), int(mq)), f"{e.get('instance_id')} mq (advertised)")
    return [(label, h, p) for (h, p), label in targets.items() if re.fullmatch(r"[A-Za-z0-9.:_-]+", h)]


def gather(ctx, reach: bool = True) -> FleetFacts:
    """Read everything the checks need. Never raises for one unreachable node or server: it becomes a fact."""
    fleet = ctx.fleet
    cnode = fleet.coordinator_node()
    facts = FleetFacts(fleet.name, fleet.runtime, fleet.coordinator_url, cnode.name, ports=planned_ports(ctx))
    node_errors: dict[str, str] = {}
    pids: dict[str, int] = {}
    for name, res in ctx.for_each_node(lambda n: procs.states(ctx.conn(n), ctx.node_procs(n))).items():
        if isinstance(res, Exception):
            node_errors[name] = str(res).splitlines()[0] if str(res) else type(res).__name__
            continue
        for st in res:
            facts.proc_states[st.name] = st.state
            if st.running and st.pid is not None:
                pids[st.name] = st.pid
    facts.coordinator_state = facts.proc_states.get(ctx.coordinator_proc().name, "unknown")
    facts.coordinator_healthy = probes.coordinator_healthy(fleet.coordinator_url)
    facts.coordinator_instances = probes.coordinator_instances(fleet.coordinator_url) \
        if facts.coordinator_healthy else None
    rendered = {(f.unit, f.name): f.text for f in render_fleet(fleet, ctx.node_layout)}

    for node, inst in fleet.instances():
        sproc, eproc = ctx.server_proc(node, inst), ctx.engine_proc(node, inst)
        i = InstanceFacts(inst.id, node.name, node.address, server_state=facts.proc_states.get(sproc.name, "unknown"),
                          engine_state=facts.proc_states.get(eproc.name, "unknown"), pid=pids.get(sproc.name))
        if i.running and node.name not in node_errors:
            conn = ctx.conn(node)
            i.process_env = consistency.process_env(conn, sproc.pidfile, SERVER_ENV_KEYS)
            if fleet.runtime == "embedded" and facts.proc_states.get(eproc.name) == "running":
                i.engine_env = consistency.process_env(conn, eproc.pidfile, consistency.ENGINE_ENV_KEYS)
            url = ctx.server_url(node, inst)
            st = probes.server_status(url)
            i.status = st.raw if st.reachable else None
            i.config = probes.get_json(url + "/config")
            ver = probes.get_json(url + "/lmc_version")
            if not isinstance(ver, (str, int, float)):  # older servers: /version is "0.5.6-g<commit>"
                ver = probes.get_json(url + "/version")
                ver = str(ver).split("-g")[0] if isinstance(ver, (str, int, float)) else None
            i.lmc_version = str(ver) if ver is not None else None
        facts.instances.append(i)

    def per_node(node) -> NodeFacts:
        nf = NodeFacts(node.name, node.address)
        lay = ctx.node_layout(node)
        files = {inst.id: str(lay.env(inst.id)) for inst in node.instances}
        if node.name == cnode.name:
            files[COORDINATOR] = str(lay.env(COORDINATOR))
        logs = {inst.id: ctx.server_proc(node, inst).log for inst in node.instances
                if ctx.server_proc(node, inst).name in pids}  # an old log of a stopped server proves nothing
        lim = {inst.id: pids[ctx.server_proc(node, inst).name] for inst in node.instances
               if ctx.server_proc(node, inst).name in pids}
        targets = _reach_targets(ctx, facts) if reach and facts.any_running else []
        res = ctx.conn(node).run(node_script(f"{bin_dir_for(node)}/python", files, logs, lim, targets),
                                 timeout=60 + REACH_TIMEOUT_S)
        nf = _fill_node(nf, parse_node_output(res.stdout), facts, rendered, node.name)
        nf.fleet_pids = {pid: name for name, pid in pids.items()
                         if name in {p.name for p in ctx.node_procs(node)}}
        nf.bind_ok = ("loopback",) if fleet.all_loopback else ("loopback", node.address, node.bind_host)
        return nf

    for name, res in ctx.for_each_node(per_node).items():
        node = next(n for n in fleet.nodes if n.name == name)
        if isinstance(res, Exception) or name in node_errors:
            facts.nodes.append(NodeFacts(name, node.address, error=node_errors.get(name) or str(res)))
        else:
            facts.nodes.append(res)
    for i in facts.instances:  # instances whose node could not be read still compare the spec's rendering
        if i.env_file is None:
            i.env_file = parse_env_sh(rendered[(i.instance, "env.sh")])
            i.env_file_rendered = True
    if facts.coordinator_env is None:
        facts.coordinator_env = parse_env_sh(rendered[(COORDINATOR, "env.sh")])
    facts.nodes.sort(key=lambda n: [x.name for x in fleet.nodes].index(n.node))
    return facts


def _fill_node(nf: NodeFacts, sec: dict[str, str], facts: FleetFacts, rendered: dict, node: str) -> NodeFacts:
    if "packages" not in sec:
        nf.error = "the node probe printed nothing"
        return nf
    try:
        nf.packages = json.loads(sec.get("packages", "").strip().splitlines()[-1])
    except (ValueError, IndexError):
        nf.packages = {}
    rd = sec.get("rdma", "").strip()
    nf.rdma_devices = int(rd) if rd.isdigit() else None
    nf.listeners = [(ln.address, ln.port, ln.process, ln.pid) for ln in parse_listeners(sec.get("listeners", ""))]
    nf.sessions = parse_sessions(sec.get("sessions", ""))
    for line in sec.get("reach", "").splitlines():
        parts = line.split(maxsplit=3)
        if len(parts) == 4 and parts[2].isdigit():
            nf.reach.append(Reach(node, parts[3], parts[1], int(parts[2]), parts[0] == "ok"))
    by_id = {i.instance: i for i in facts.instances}
    for key, text in sec.items():
        kind, _, label = key.partition(" ")
        if kind == "file" and text.strip():
            if label == COORDINATOR:
                facts.coordinator_env = safe_env(parse_env_sh(text))
            elif label in by_id:
                by_id[label].env_file = safe_env(parse_env_sh(text))
        elif kind == "nonehash" and label in by_id:
            by_id[label].none_hash = _none_hash(text)
        elif kind == "hashfallback" and label in by_id:
            by_id[label].hash_fallback = hash_fallback(text)
        elif kind == "limits" and label in by_id:
            by_id[label].memlock = asdict(parse_proc_limits(text, f"/proc/{by_id[label].pid}/limits"))
    return nf


def run(ctx, reach: bool = True) -> tuple[FleetFacts, Report]:
    facts = gather(ctx, reach=reach)
    return facts, check(facts)


def summary_lines(report: Report) -> list[str]:
    """The report as text, with a per-instance table of what each peer uses."""
    table: dict[str, Any] = report.facts.get("instances") or {}
    keys = ("server", "p2p_state", "PYTHONHASHSEED", "chunk_size", "hash_algorithm", "l1_align_bytes", "model",
            "lmcache_version", "UCX_TLS")
    lines = [report.title]
    if table:
        rows = [("instance", *keys)] + [(inst, *(str(v) if (v := vals.get(k)) is not None else "-" for k in keys))
                                        for inst, vals in table.items()]
        widths = [min(28, max(len(r[c]) for r in rows)) for c in range(len(rows[0]))]
        lines += ["  " + " ".join(f"{cell[:w]:<{w}}" for cell, w in zip(r, widths)).rstrip() for r in rows]
    lines += report.render().splitlines()[1:]
    return lines
