"""Read everything the doctor's checks need (impure, bounded): `gather(ctx) -> FleetFacts`.

Per node, one batched read through its connector (`facts.sections.read_node`, so over SSH too): package
versions from the node's interpreter, RDMA devices, listening sockets and sessions, each instance's env.sh, and
for each running server its log's NONE_HASH and hash-fallback lines, `/proc/<pid>/limits`, its process
environment (must-agree keys and a few more, never the whole of it), for each dead one its log's start-up refusal,
plus TCP connects to every advertised P2P URL, mq port and the coordinator. Over HTTP: each running server's
/status, /config, /lmc_version and the coordinator's /healthz and /instances. One unreachable node or server
becomes a fact, never an exception.
"""

from __future__ import annotations

import re
import time
from dataclasses import asdict

from p2p_ops.diagnose.doctor.checks import START_REFUSALS
from p2p_ops.diagnose.signatures import SIGNATURES
from p2p_ops.diagnose.doctor.model import FleetFacts, InstanceFacts, NodeFacts
from p2p_ops.diagnose.doctor.peers import safe_env
from p2p_ops.diagnose.redact import redact_text
from p2p_ops.endpoints import engine_api, fetch, lmcache_api
from p2p_ops.facts import node_facts
from p2p_ops.facts.base import CommandFact
from p2p_ops.facts.envfile import env_file_fact, process_env_fact
from p2p_ops.facts.limits import proc_limits_fact
from p2p_ops.facts.logs import recent_grep_fact
from p2p_ops.facts.proc_argv import process_argv_fact
from p2p_ops.facts.reach import CONNECT_TIMEOUT_S, reach_fact
from p2p_ops.facts.sections import read_node
from p2p_ops.facts.server_log import hash_fallback_fact, none_hash_fact
from p2p_ops.lifecycle import procs
from p2p_ops.lifecycle.context import FleetContext
from p2p_ops.lifecycle.preflight.readiness import mooncake_problem
from p2p_ops.lifecycle.render import SSH_UCX_LOOKUP, bin_dir_for, fleet_runs
from p2p_ops.spec.agreement import ENGINE_MODEL_ENV, SERVER_ENV, vllm_values
from p2p_ops.spec.layout import COORDINATOR
from p2p_ops.spec.model import Instance, Node
from p2p_ops.spec.ports import INSTANCE_KINDS
from p2p_ops.spec.units import ROLES, Proc, port_plan

# The ports whose owner the doctor knows how to judge (the router's state is in `p2pctl status`).
CHECKED_PORTS = ("coordinator", *INSTANCE_KINDS)
# Read from the server's process environment (never the whole environment: it may hold secrets).
SERVER_ENV_KEYS = SERVER_ENV + ("LMCACHE_COORDINATOR_URL", "LMCACHE_P2P_ADVERTISE_URL", "UCX_NET_DEVICES",
                                "UCX_MAX_RMA_RAILS")

_OURS = set(SSH_UCX_LOOKUP.split("\n"))


def watched_procs(ctx: FleetContext, node: Node) -> list[Proc]:
    """Every unit of the fleet on this node whose sockets the doctor reads (coordinator, servers, engines, the
    router), and the fleet's Prometheus on the first local node (it runs where p2pctl runs)."""
    out = ctx.procs(node, roles=ROLES)
    if node.name == next((n.name for n in ctx.fleet.nodes if n.connection == "local"), None):
        out += [ctx.proc(u) for u in ctx.units(roles=ROLES) if u.node is None]
    return out


def _reach_targets(ctx: FleetContext, facts: FleetFacts) -> list[tuple[str, str, int]]:
    """(label, host, port) of everything peers connect to; only where the owner runs."""
    targets: dict[tuple[str, int], str] = {}
    fleet = ctx.fleet
    if facts.coordinator_state == "running":
        targets[(fleet.coordinator.host, fleet.coordinator.port)] = "coordinator"
    for node, inst in fleet.instances():
        if facts.proc_states.get(ctx.unit("server", inst).name) == "running":
            targets[(node.address, inst.ports.p2p)] = f"{inst.id} p2p"
            targets[(node.address, inst.ports.mp)] = f"{inst.id} mq"
    for e in facts.coordinator_instances or []:
        url, ip, mq = e.get("p2p_advertised_url") or "", e.get("ip"), e.get("mq_port")
        host, _, port = url.rpartition(":")
        if host and port.isdecimal():
            targets.setdefault((host, int(port)), f"{e.get('instance_id')} p2p (advertised)")
        if ip and mq:
            targets.setdefault((str(ip), int(mq)), f"{e.get('instance_id')} mq (advertised)")
    return [(label, h, p) for (h, p), label in targets.items() if re.fullmatch(r"[A-Za-z0-9.:_-]+", h)]


def _instance_http(ctx: FleetContext, node: Node, inst: Instance, i: InstanceFacts) -> None:
    url = ctx.server_url(node, inst)
    st = lmcache_api.server_status(url)
    i.status = st.raw if st.reachable else None
    if i.status is None:
        return      # a server that does not answer /status (frozen, wedged) answers nothing else: no more waits
    i.config = fetch.get_json(url + "/config")
    ver = fetch.get_json(url + "/lmc_version")
    if not isinstance(ver, (str, int, float)):  # older servers: /version is "0.5.6-g<commit>"
        ver = fetch.get_json(url + "/version")
        ver = str(ver).split("-g")[0] if isinstance(ver, (str, int, float)) else None
    i.lmc_version = str(ver) if ver is not None else None


ENGINE_LINK_LINES = r"LMCache connect to .* failed|running as a plain engine"


def engine_flags(argv: list[str]) -> dict[str, str]:
    """What the doctor keeps of an engine's command line: vLLM's must-agree flags and whether it publishes KV
    events (never the whole line: it may carry a key)."""
    out = vllm_values(argv)
    if argv:
        cfg = next((argv[i + 1] for i, w in enumerate(argv[:-1]) if w == "--kv-events-config"), "")
        out["kv_events"] = "on" if '"enable_kv_cache_events":true' in cfg.replace(" ", "") else "off"
    return out


def _engine_http(ctx: FleetContext, node: Node, inst: Instance, i: InstanceFacts) -> None:
    """A running engine answers /health, and (embedded) is linked to its server: else it serves degraded."""
    url = ctx.engine_url(node, inst)
    if not engine_api.engine_ready(ctx.fleet.runtime, url, ctx.fleet.model):
        i.engine_health = "no answer"
    elif ctx.fleet.runtime == "embedded" and engine_api.engine_lmcache_state(url) == "disconnected":
        i.engine_health = "degraded"
    else:
        i.engine_health = "healthy"


def _inflight(status: dict, by_mq: dict[tuple[str, int], str]) -> dict:
    """One sample of what a server has in flight: lookup jobs it holds for peers, L1 read locks, its own
    prefetches, and the lookups it has in flight toward each peer."""
    l1 = lmcache_api.l1_manager(status)
    return {"t": time.monotonic(), "jobs": int(status.get("active_p2p_lookup_jobs") or 0),
            "read_locked": int(l1.get("read_locked_count") or 0),
            "prefetch": int(status.get("active_prefetch_jobs") or 0),
            "in_flight_to": {by_mq[(h, p)]: int(a.get("in_flight_lookups") or 0)
                             for h, p, a in lmcache_api.p2p_adapters(status) if (h, p) in by_mq}}


def sample_inflight(ctx: FleetContext, facts: FleetFacts, samples: int, period_s: float = 1.0) -> None:
    """`samples` reads of every running server's /status, `period_s` apart (the lookup-leak evidence)."""
    by_mq = {(n.address, i.ports.mp): i.id for n, i in ctx.fleet.instances()}
    by_id = {i.instance: i for i in facts.instances}
    for k in range(samples):
        if k and not any(i.lookup_samples for i in facts.instances):
            return  # no server answered: nothing to watch over time
        if k:
            time.sleep(period_s)
        for node, inst in ctx.fleet.instances():
            if by_id[inst.id].running and by_id[inst.id].status is not None:
                st = lmcache_api.server_status(ctx.server_url(node, inst))
                if st.reachable:
                    by_id[inst.id].lookup_samples.append(_inflight(st.raw, by_mq))


def doctor_batch(ctx: FleetContext, node: Node, facts: FleetFacts, pids: dict[str, int], reach: bool
                 ) -> dict[str, CommandFact]:
    """What the doctor reads on one node, by label: some of the node's own (`facts.node_facts`), then
    `<kind> <instance>` for per-instance facts."""
    lay = ctx.node_layout(node)
    batch = node_facts(("python", "rdma", "topo", "listeners", "sessions", "ipv4"), f"{bin_dir_for(node)}/python")
    for inst in node.instances:
        batch[f"env {inst.id}"] = env_file_fact(str(lay.env(inst.id)))
    if node.name == ctx.fleet.coordinator_node().name:
        batch[f"env {COORDINATOR}"] = env_file_fact(str(lay.env(COORDINATOR)))
    for inst in node.instances:
        sproc, eproc = ctx.proc("server", inst), ctx.proc("engine", inst)
        if sproc.name in pids:  # an old log of a stopped server proves nothing
            batch[f"nonehash {inst.id}"] = none_hash_fact(sproc.log)
            batch[f"hashfallback {inst.id}"] = hash_fallback_fact(sproc.log)
            batch[f"limits {inst.id}"] = proc_limits_fact(pids[sproc.name])
            batch[f"server_env {inst.id}"] = process_env_fact(sproc.pidfile, SERVER_ENV_KEYS)
            if ctx.fleet.runtime == "embedded" and eproc.name in pids:
                batch[f"engine_env {inst.id}"] = process_env_fact(eproc.pidfile, ENGINE_MODEL_ENV)
        elif facts.proc_states.get(sproc.name) in ("dead", "stale"):  # its log's end says why it died
            batch[f"startlog {inst.id}"] = recent_grep_fact(
                sproc.log, [SIGNATURES[c].pattern for c in START_REFUSALS], 400, 5)
        if eproc.name in pids:
            batch[f"engine_log {inst.id}"] = recent_grep_fact(eproc.log, [ENGINE_LINK_LINES], 2000, 3)
            batch[f"engine_argv {inst.id}"] = process_argv_fact(eproc.pidfile)
            if ctx.fleet.runtime == "vllm":
                batch[f"engine_env {inst.id}"] = process_env_fact(eproc.pidfile, ("PYTHONHASHSEED",))
    targets = _reach_targets(ctx, facts) if reach and facts.any_running else []
    if targets:
        batch["reach"] = reach_fact(node.name, targets)
    return batch


# A per-instance label's kind -> the InstanceFacts field its parsed value fills (through a converter, if any).
_INSTANCE_FIELDS = {"nonehash": ("none_hash", None), "hashfallback": ("hash_fallback", None),
                    "limits": ("memlock", asdict), "server_env": ("process_env", None),
                    "engine_env": ("engine_env", None), "engine_log": ("engine_log", None),
                    "engine_argv": ("engine_flags", engine_flags), "startlog": ("start_log", None)}


def fill_node(nf: NodeFacts, batch: dict[str, CommandFact], read: dict, facts: FleetFacts) -> NodeFacts:
    """Parse one node's batched read into its NodeFacts and its instances' facts (pure)."""
    if read["python"].exit_code == -1 and not read["python"].output:
        nf.error = "the node read printed nothing"
        return nf

    def value(label: str):
        return batch[label].parse(read[label].output)

    nf.packages = value("python").packages
    nf.mooncake = mooncake_problem(facts.transfer_engine, value("python"))
    nf.rdma = value("rdma")
    nf.rdma_devices = len(nf.rdma)
    nf.topo_text = read["topo"].output if "topo" in read and read["topo"].ok else ""
    nf.ipv4 = value("ipv4") if "ipv4" in read and read["ipv4"].ok else {}
    nf.listeners = value("listeners")
    nf.sessions = value("sessions")
    nf.reach = value("reach") if "reach" in batch else []
    by_id = {i.instance: i for i in facts.instances}
    for label in batch:
        kind, _, iid = label.partition(" ")
        if kind == "env" and read[label].ok:
            env_sh = value(label)
            env = safe_env(env_sh.env)
            if iid == COORDINATOR:
                facts.coordinator_env = env
            elif iid in by_id:
                by_id[iid].env_file = env
                # The SSH node's interface lookup is p2pctl's own; any other line it does not render is foreign.
                by_id[iid].env_foreign = _foreign_lines([(n, t) for n, t in env_sh.foreign if t not in _OURS])
        elif iid in by_id and kind in _INSTANCE_FIELDS:
            field, convert = _INSTANCE_FIELDS[kind]
            parsed = value(label)
            setattr(by_id[iid], field, convert(parsed) if convert else parsed)
    return nf


def gather(ctx: FleetContext, reach: bool = True, leak_samples: int = 3) -> FleetFacts:
    """Read everything the checks need. Never raises for one unreachable node or server: it becomes a fact."""
    fleet = ctx.fleet
    facts = FleetFacts(fleet.name, fleet.runtime, fleet.coordinator_url, fleet.coordinator_node().name,
                       ports=[p for p in port_plan(fleet) if p.kind in CHECKED_PORTS],
                       kv_events_expected=fleet.kv_events_on, lookup_timeout_s=fleet.settings.p2p_lookup_timeout,
                       transfer_engine=fleet.settings.transfer_engine)
    node_errors: dict[str, str] = {}
    pids: dict[str, int] = {}
    for name, res in ctx.for_each_node(lambda n: procs.states(ctx.conn(n), watched_procs(ctx, n))).items():
        if isinstance(res, Exception):
            node_errors[name] = str(res).splitlines()[0] if str(res) else type(res).__name__
            continue
        for st in res:
            facts.proc_states[st.name] = st.state
            if st.running and st.pid is not None:
                pids[st.name] = st.pid
    facts.coordinator_state = facts.proc_states.get(ctx.unit("coordinator").name, "unknown")
    facts.coordinator_healthy = lmcache_api.coordinator_healthy(fleet.coordinator_url)
    facts.coordinator_instances = lmcache_api.coordinator_instances(fleet.coordinator_url) \
        if facts.coordinator_healthy else None
    if fleet.router.enabled:
        facts.router_url, facts.router_node = fleet.router_url, fleet.router_node().name
        facts.router_state = facts.proc_states.get(ctx.unit("router").name, "unknown")
        # A stopped (SIGSTOP) or wedged router still reads as a running process: only its answer tells.
        facts.router_healthy = facts.router_state == "running" and fetch.answers(f"{fleet.router_url}/health",
                                                                                 timeout=3.0)
    runs = fleet_runs(fleet, ctx.node_layout)

    for node, inst in fleet.instances():
        sproc, eproc = ctx.unit("server", inst), ctx.unit("engine", inst)
        facts.instances.append(InstanceFacts(
            inst.id, node.name, node.address, server_state=facts.proc_states.get(sproc.name, "unknown"),
            engine_state=facts.proc_states.get(eproc.name, "unknown"), pid=pids.get(sproc.name), gpu=inst.gpu))
    by_id = {i.instance: i for i in facts.instances}

    def node_http(node: Node) -> None:
        for inst in node.instances:
            if node.name in node_errors:
                continue
            if by_id[inst.id].running:
                _instance_http(ctx, node, inst, by_id[inst.id])
            if by_id[inst.id].engine_state == "running":
                _engine_http(ctx, node, inst, by_id[inst.id])

    # Four HTTP reads per running server: nodes side by side, not one after another (bench/suite/fleet_scale).
    ctx.for_each_node(node_http)
    sample_inflight(ctx, facts, leak_samples)

    def per_node(node) -> NodeFacts:
        batch = doctor_batch(ctx, node, facts, pids, reach)
        read = read_node(ctx.conn(node), batch, timeout=60 + CONNECT_TIMEOUT_S)
        nf = fill_node(NodeFacts(node.name, node.address), batch, read, facts)
        nf.fleet_pids = {pid: name for name, pid in pids.items()
                         if name in {p.name for p in watched_procs(ctx, node)}}
        # Where a fleet process may listen: loopback on an all-loopback fleet, else loopback and the node's address.
        nf.bind_ok = ("loopback",) if fleet.all_loopback else ("loopback", node.address, node.bind_host)
        # Prometheus listens where the spec's prometheus.host says: the operator's choice, not a leak.
        nf.proc_binds = {ctx.unit("prometheus").name: (fleet.prometheus.host,)}
        if fleet.settings.transfer_engine == "mooncake_te" and fleet.settings.mooncake_listen_any:
            # Mooncake's two wildcard listeners per server, accepted in the spec (settings.mooncake_listen_any).
            nf.proc_binds |= {ctx.proc("server", i).name: ("0.0.0.0", "*", "::") for i in node.instances}
        return nf

    results = ctx.for_each_node(per_node)  # in the spec's order
    for node in fleet.nodes:
        res = results[node.name]
        if isinstance(res, Exception) or node.name in node_errors:
            facts.nodes.append(NodeFacts(node.name, node.address, error=node_errors.get(node.name) or str(res)))
        else:
            facts.nodes.append(res)
    for i in facts.instances:  # instances whose node could not be read still compare the spec's rendering
        i.spec_env = safe_env(runs[i.instance].env)
        if i.env_file is None:
            i.env_file = dict(runs[i.instance].env)
            i.env_file_rendered = True
    facts.coordinator_spec_env = dict(runs[COORDINATOR].env)
    if facts.coordinator_env is None:
        facts.coordinator_env = facts.coordinator_spec_env
    return facts


def _foreign_lines(foreign: list[tuple[int, str]]) -> list[str]:
    """env.sh lines p2pctl did not render, redacted as one block (a key's PEM body spans lines that name no
    secret one by one); only their numbers when redaction changed how many lines there are."""
    red = redact_text("\n".join(t for _, t in foreign)).text.split("\n")
    if len(red) != len(foreign):
        return [f"line {n}: (not shown)" for n, _ in foreign]
    return [f"line {n}: {t[:200]}" for (n, _), t in zip(foreign, red)]
