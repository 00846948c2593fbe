"""The doctor's judgement (pure): `check(facts)` turns `FleetFacts` into a `findings.Report`."""

from __future__ import annotations

from itertools import takewhile
from typing import Optional

from p2p_ops import causes
from p2p_ops.causes import CAUSES
from p2p_ops.diagnose.doctor.agreement import check_agreement, names_of, pairs, restart
from p2p_ops.diagnose.doctor.leak import check_lookup_leak
from p2p_ops.diagnose.doctor.model import FleetFacts, InstanceFacts, NodeFacts
from p2p_ops.diagnose.doctor.nic import pin_views
from p2p_ops.diagnose.doctor.peers import observed
from p2p_ops.diagnose.findings import Report
from p2p_ops.diagnose.signatures import SIGNATURES
from p2p_ops.facts.python_env import version_of
from p2p_ops.spec.model import is_loopback
from p2p_ops.spec.layout import COORDINATOR
from p2p_ops.spec.startup import l1_misaligned, nearest_l1

_NET_TLS = {"tcp", "rc", "rc_v", "rc_x", "rc_mlx5", "rc_verbs", "ud", "ud_v", "ud_x", "ud_mlx5", "ud_verbs", "dc",
            "dc_x", "dc_mlx5", "ib", "all"}
_HOST_TLS = _NET_TLS | {"sm", "shm", "posix", "sysv", "cma", "knem", "xpmem"}
_RDMA_TLS = _NET_TLS - {"tcp", "all"}
_CUDA_TLS = {"cuda", "cuda_copy", "cuda_ipc", "gdr_copy"}


def _check_hash_fallback(report: Report, facts: FleetFacts) -> None:
    """LMCache's own log says it fell back to Python's hash(): on Python < 3.12 hash(None) is an address, so
    NONE_HASH (and every chunk key) differs per process even with equal PYTHONHASHSEEDs."""
    fell = {i.instance: i.hash_fallback for i in facts.instances if i.hash_fallback}
    if fell:
        report.add("error", "hash:builtin_fallback", names_of(fell), pairs(fell), "", "builtin_hash",
                   restart=restart(facts, sorted(fell), "server"))


def _check_mooncake(report: Report, facts: FleetFacts) -> None:
    for n in facts.nodes:
        if n.mooncake and not n.error:
            report.add("error", "mooncake", n.node, version_of(n.packages, "mooncake") or "not installed",
                       n.mooncake, "mooncake_broken")


def _check_coordinator(report: Report, facts: FleetFacts) -> None:
    running = [i for i in facts.instances if i.running]
    if not facts.coordinator_healthy and (facts.coordinator_state == "running" or running):
        if facts.coordinator_state == "running":
            msg = f"the coordinator process runs but {facts.coordinator_url}/healthz does not answer healthy"
        else:
            msg = (f"the coordinator is not running (process {facts.coordinator_state}): servers cannot register "
                   "or discover peers; each drops its peer adapters after 4 missed polls")
        report.add("error", "coordinator", "coordinator", f"{facts.coordinator_url} process "
                   f"{facts.coordinator_state}", msg, "coordinator_down",
                   restart=restart(facts, [COORDINATOR], "coordinator"))
    for inst in running:
        url = inst.process_env.get("LMCACHE_COORDINATOR_URL") or (inst.env_file or {}).get("LMCACHE_COORDINATOR_URL")
        if url and url.rstrip("/") != facts.coordinator_url.rstrip("/"):
            report.add("error", "coordinator_url", inst.instance, f"{inst.instance}={url}, fleet={facts.coordinator_url}",
                       "", "coordinator_url_wrong", url=facts.coordinator_url,
                       restart=restart(facts, [inst.instance], "server"))
    if facts.coordinator_healthy:
        _check_membership(report, facts, running)
    for inst in running:
        if inst.status is None:
            report.add("error", "server_http", inst.instance, "no answer", "", "server_unresponsive",
                       instance=inst.instance)
            continue
        state = inst.status.get("p2p_state", "unknown")
        peers = inst.status.get("p2p_peer_count")
        if state != "registered":
            report.add("error", "p2p_state", inst.instance, f"p2p_state={state}", f"{inst.instance} is {state}: its "
                       "last GET /instances failed or did not list itself, so it has no peers", "not_registered")
        elif isinstance(peers, int) and peers != len(running) - 1:
            report.add("warn", "peer_count", inst.instance, f"{peers} peer(s) {inst.status.get('p2p_peers')}",
                       f"{inst.instance} sees {peers} peer(s), {len(running) - 1} other server(s) are running",
                       "peer_not_connected")


def _check_membership(report: Report, facts: FleetFacts, running: list[InstanceFacts]) -> None:
    listed = {str(e.get("instance_id")): e for e in facts.coordinator_instances or []}
    known = {i.instance for i in facts.instances}
    for inst in running:
        entry = listed.get(inst.instance)
        if entry is None and inst.status is None:     # frozen or wedged: its heartbeats stopped, so it was dropped
            report.add("error", "registration", inst.instance, "absent from /instances, /status unanswered",
                       f"{inst.instance}'s server runs but answers nothing, and the coordinator dropped it for "
                       "missed heartbeats", "instance_evicted")
            continue
        if entry is None:
            report.add("error", "registration", inst.instance, "absent from /instances", "", "not_registered")
            continue
        want = inst.process_env.get("LMCACHE_P2P_ADVERTISE_URL") or (inst.env_file or {}).get(
            "LMCACHE_P2P_ADVERTISE_URL")
        got = entry.get("p2p_advertised_url") or ""
        if not got or not entry.get("mq_port"):
            report.add("error", "registration", inst.instance, f"p2p_advertised_url={got!r} mq_port="
                       f"{entry.get('mq_port')}", "", "not_advertised")
        elif want and got != want:
            report.add("error", "registration", inst.instance, f"advertised {got}, env {want}",
                       f"{inst.instance} advertises {got} but is configured for {want}", "advertise_stale",
                       restart=restart(facts, [inst.instance], "server"))
    for iid in sorted(set(listed) - known):
        report.add("warn", "registration", iid, listed[iid].get("p2p_advertised_url"), "", "foreign_instance")


def _check_reach(report: Report, facts: FleetFacts) -> None:
    # A server that runs but answers nothing (frozen, wedged) accepts no connection once its backlog is full, and
    # one that died (still listed until the coordinator drops it) accepts none at all: the process and server_http
    # findings say why, a failed connect to it is their consequence.
    mute = {i.instance for i in facts.instances if (i.running and i.status is None) or i.server_state == "dead"}
    for node in facts.nodes:
        for r in node.reach:
            if not r.ok and r.target.split(" ")[0] not in mute:
                report.add("error", "reach", f"{r.source} -> {r.target}", f"{r.host}:{r.port}",
                           f"node {r.source} cannot open a TCP connection to {r.target} at {r.host}:{r.port}",
                           "peer_unreachable")


def wide_binds(node: NodeFacts) -> list[tuple[str, str, int, Optional[int]]]:
    """(process name, address, port, pid) of each fleet listener bound wider than the node allows."""
    out = []
    for ln in node.listeners:
        if ln.pid is None:
            continue  # /proc/net/tcp fallback or another user's socket: cannot be attributed
        owner = node.fleet_pids.get(node.sessions.get(ln.pid, -1)) or node.fleet_pids.get(ln.pid)
        allowed = node.bind_ok + node.proc_binds.get(owner, ())
        host = ln.address.strip("[]").split("%", 1)[0]  # "*" is every interface, never loopback
        if owner is None or host in allowed or ("loopback" in allowed and is_loopback(host)):
            continue
        out.append((owner, ln.address, ln.port, ln.pid))
    return out


def _check_binds(report: Report, facts: FleetFacts) -> None:
    """Loopback means loopback: a fleet process listening on 0.0.0.0, eth0 or another interface is named."""
    for node in facts.nodes:
        if node.error:
            continue
        for owner, address, port, pid in wide_binds(node):
            # A listener on a port the fleet did not plan is UCX's (NIXL's transfer channel).
            planned = any(p.node == node.node and p.port == port for p in facts.ports)
            scope = "127.0.0.0/8" if node.bind_ok == ("loopback",) else f"{node.address} (and loopback)"
            report.add("error", "bind:wide", f"{owner} on {node.node}", f"{address}:{port} (pid {pid})",
                       f"{owner} listens on {address}:{port}, outside {scope}",
                       "bind_wide" if planned else "ucx_listens_wide")


def _check_ports(report: Report, facts: FleetFacts) -> None:
    before = len(report.problems)
    for p in facts.ports:
        node = facts.node(p.node)
        if node is None or node.error:
            continue
        holders = [ln for ln in node.listeners if ln.port == p.port and
                   (ln.address in (p.bind, "*", "0.0.0.0", "::", "[::]") or p.bind in ("0.0.0.0", "*"))]
        owner_running = facts.proc_states.get(p.process) == "running"
        if owner_running and not holders:
            report.add("error", "port_listening", p.role,
                       f"{p.bind}:{p.port}", f"{p.process} runs but nothing listens on {p.bind}:{p.port} ({p.role})",
                       "port_not_listening", log=f"{p.process}.log")
        elif not owner_running and holders:
            who = holders[0].process or "another process"
            pid = f" pid {holders[0].pid}" if holders[0].pid else ""
            report.add("error", "port_busy", p.role, f"{p.bind}:{p.port} held by {who}{pid}",
                       f"port {p.port} ({p.role}) on {p.node} is taken while {p.process} is not running: it will "
                       "fail to start", "port_busy")
    if not facts.any_running and len(report.problems) == before and facts.ports:
        report.add("info", "ports", "fleet", f"{len(facts.ports)} ports", "every planned port is free on its node")


def _check_memlock(report: Report, facts: FleetFacts) -> None:
    for inst in facts.instances:
        m = inst.memlock
        if not inst.running or not m or m.get("error") or m.get("soft") is None:
            continue
        node = facts.node(inst.node)
        rdma = bool(node and node.rdma_devices) or bool(set(_tls_tokens(observed(inst, {})["UCX_TLS"][0])) & _RDMA_TLS)
        soft = m["soft"]
        if rdma:
            report.add("error", "memlock", inst.instance, f"{soft} bytes ({m.get('source')})", "", "memlock")
        else:
            report.add("info", "memlock", inst.instance, f"{soft} bytes ({m.get('source')})",
                       "memlock is limited; fine for TCP/shared memory, RDMA registration would need it unlimited")


def _tls_tokens(value: str) -> list[str]:
    return [t.strip() for t in value.split(",") if t.strip()] if value and value != "(unset)" else []


# NIXL >= this refuses a UCX_TLS without a CUDA transport when GPUs are present ("Invalid UCX_TLS=... NVIDIA
# GPU(s) are present, but this setting does not enable CUDA memory support", NIXL PR #1617): the message is in
# nixl-cu12 1.5.1's libplugin_UCX.so. Older releases were not checked, so for them it is a warning.
_NIXL_CUDA_TLS_CHECK = (1, 5, 1)


def _check_gpu_tls(report: Report, inst: InstanceFacts, node: NodeFacts | None, tokens: list[str], seen: str) -> bool:
    """On a GPU node: UCX_TLS must let NIXL see CUDA memory (True: a finding was made)."""
    if tokens[0].startswith("^"):
        enabled = not {tokens[0][1:].lower(), *(t.lower() for t in tokens[1:])} & {"cuda", "cuda_copy"}
    else:
        enabled = bool({t.lower() for t in tokens} & {"cuda", "cuda_copy", "all"})
    if enabled:
        return False
    nixl = version_of(node.packages, "nixl") if node else None
    known = tuple(int(p) for p in takewhile(str.isdecimal, (nixl or "").split("."))) >= _NIXL_CUDA_TLS_CHECK
    report.add("error" if known else "warn", "ucx_tls", inst.instance, f"{seen}, GPUs present, nixl {nixl or '?'}",
               "" if known else "older NIXL was not checked: it may refuse it", "tls_without_cuda")
    return True


def _check_ucx_tls(report: Report, facts: FleetFacts) -> None:
    for inst in facts.instances:
        value = observed(inst, {})["UCX_TLS"][0]
        tokens = _tls_tokens(value)
        if not tokens:
            continue
        node = facts.node(inst.node)
        gpus = inst.gpu is not None or bool(node and "GPU0" in node.topo_text)  # the spec's, or nvidia-smi's
        subject, seen = inst.instance, f"UCX_TLS={value}"
        if any("^" in t for t in tokens[1:]) or "^" in tokens[0].lstrip("^") or tokens[0].startswith("^^"):
            report.add("error", "ucx_tls", subject, seen, "", "tls_caret")
            continue
        if gpus and _check_gpu_tls(report, inst, node, tokens, seen):
            continue
        if tokens[0].startswith("^"):
            denied = {tokens[0][1:], *tokens[1:]}
            if facts.multi_host and "tcp" in denied and not (node and node.rdma_devices):
                report.add("error", "ucx_tls", subject, seen, "UCX_TLS denies tcp on a node without RDMA",
                           "tls_no_network")
            continue
        names = {t.lower() for t in tokens}
        if not names & _HOST_TLS:
            report.add("error", "ucx_tls", subject, seen, "UCX_TLS lists only GPU transports", "tls_unavailable")
            continue
        if facts.multi_host and not names & _NET_TLS:
            report.add("error", "ucx_tls", subject, seen, "", "tls_no_network")
        elif names & _NET_TLS and not names & {"tcp", "all"} and node is not None and node.rdma_devices == 0:
            report.add("error", "ucx_tls", subject, seen, f"UCX_TLS asks for RDMA transports but node "
                       f"{inst.node} has no RDMA device", "tls_unavailable")
        if names & _CUDA_TLS and not gpus:
            report.add("warn", "ucx_tls", subject, seen, "", "tls_cuda_without_gpu")


def rdma_expected(facts: FleetFacts) -> tuple[bool, str]:
    """Does this fleet mean to move KV over RDMA? (False, why) when its transports are TCP/shared memory by
    design: every node on loopback, or every server's UCX_TLS an allow-list without an RDMA transport."""
    if facts.nodes and all(is_loopback(n.address) for n in facts.nodes):
        return False, "every node of this fleet is on 127.0.0.0/8: P2P moves over shared memory/TCP by design"
    tls = {i.instance: observed(i, {})["UCX_TLS"][0] for i in facts.instances}
    allow = [_tls_tokens(v) for v in tls.values()]
    if allow and all(t and not t[0].startswith("^") and not {x.lower() for x in t} & (_RDMA_TLS | {"all"})
                     for t in allow):
        return False, f"no server's UCX_TLS names an RDMA transport ({pairs(tls)}): TCP/shared memory by spec"
    return True, ""


def _check_nic_pin(report: Report, facts: FleetFacts) -> None:
    """A pinned UCX_NET_DEVICES on a down port or on another NUMA node than the instance's L1 (the NIC plan)."""
    for view in pin_views(facts):
        for problem in view.wrong:
            report.add("error", "nic_pin", view.instance, f"UCX_NET_DEVICES={view.pin} ({view.where})",
                       f"{view.instance}'s P2P reads go through a NIC that cannot serve them well: {problem}",
                       "nic_pin", **view.fix)


def _check_processes(report: Report, facts: FleetFacts) -> None:
    for inst in facts.instances:
        # "none": stopped cleanly (no pid file), yet the spec has it and its peers and engine go on without it.
        if inst.server_state in ("dead", "stale", "none"):
            state = "stopped" if inst.server_state == "none" else inst.server_state
            report.add("error", "process", f"{inst.instance}/server", inst.server_state,
                       f"{inst.instance}'s server is {state} while the fleet runs", "server_down",
                       instance=inst.instance, restart=restart(facts, [inst.instance], "server"))


# What LMCache refuses at start (`validate` refuses each in a spec; a dead server still shows one after an env.sh
# edited by hand, or with a spec older than the refusal): each a signature (diagnose/signatures.yaml) and a cause.
START_REFUSALS = ("l1_misaligned", "no_transfer_channel", "server_args_clash")


def _l1_misaligned(inst: InstanceFacts) -> Optional[tuple[str, str]]:
    """(why, the nearest sizes); None when env.sh's L1 is whole pages (the NIXL error had another cause) or unknown."""
    env = inst.env_file or {}
    try:
        gb, align = float(env["LMCACHE_L1_SIZE_GB"]), int(env["LMCACHE_L1_ALIGN_BYTES"])
    except (KeyError, ValueError):
        return None
    why = l1_misaligned(gb, align)
    return (f" because its l1_size_gb {why}", " or ".join(nearest_l1(gb, align))) if why else None


def _check_start_refusals(report: Report, facts: FleetFacts) -> None:
    """A dead server's log ends in LMCache's own start-up refusal: that is why it died (`gather` greps it)."""
    for inst in facts.instances:
        for cause in START_REFUSALS if inst.server_state in ("dead", "stale") else ():
            sig = SIGNATURES[cause]
            line = next((ln.strip() for ln in reversed(inst.start_log) if sig.search(ln)), None)
            if line is None:
                continue
            said = _l1_misaligned(inst) if cause == "l1_misaligned" else (f": {CAUSES[cause].means}", "")
            if said:
                report.add("error", cause, f"{inst.instance}/server", line[:300],
                           f"{inst.instance}'s server died at start{said[0]}", cause, nearest=said[1],
                           flag="the flag LMCache's line names", setting="<the setting that line names>",
                           restart=restart(facts, [inst.instance], "server"))
                break


def _check_engines(report: Report, facts: FleetFacts) -> None:
    """Every engine the fleet runs belongs in the report, a degraded one too: an embedded engine whose lmcache
    server refused it (a chunk size that differs, the server down) keeps serving as a plain engine. It answers
    /health, shares nothing and logs why; `p2pctl wait` calls that "degraded", and so does the doctor, with the
    engine's own log line as the evidence."""
    for inst in facts.instances:
        subject = f"{inst.instance}/engine"
        again = {"instance": inst.instance, "restart": restart(facts, [inst.instance], "engine")}
        if inst.engine_state in ("dead", "stale"):
            report.add("error", "engine", subject, inst.engine_state,
                       f"{inst.instance}'s engine is {inst.engine_state} while the fleet runs", "engine_down", **again)
        elif inst.engine_health == "no answer":
            report.add("error", "engine", subject, "process runs, /health does not answer",
                       f"{inst.instance}'s engine runs but does not answer (still loading, or wedged)", "engine_down",
                       **again)
        elif inst.engine_health == "degraded":
            said = inst.engine_log[-1][:300] if inst.engine_log else "its log names no reason"
            report.add("error", "engine_degraded", subject, said, "", "engine_degraded", instance=inst.instance)


def _check_router(report: Report, facts: FleetFacts) -> None:
    """Clients of a router fleet send to the router: every engine may serve while none of them is reached."""
    if not facts.router_url or facts.router_healthy or not (facts.router_state == "running" or facts.any_running):
        return
    if facts.router_state == "running":
        seen, said = "process runs, /health does not answer", "the router runs but does not answer (stopped or wedged)"
    else:
        state = "stopped" if facts.router_state == "none" else facts.router_state
        seen, said = f"process {facts.router_state}", f"the router is {state} while the fleet runs"
    report.add("error", "router", "router", f"{facts.router_url}: {seen}", said, "router_down",
               restart=causes.restart((facts.router_node, "router")))


def _check_kv_events(report: Report, facts: FleetFacts) -> None:
    """A router fleet needs KV events from every engine (what kv_aware routes on, and llm-d's P2P path seeds)."""
    if not facts.kv_events_expected:
        return
    for inst in facts.instances:
        if inst.engine_state == "running" and inst.engine_flags.get("kv_events") == "off":
            report.add("error", "kv_events", f"{inst.instance}/engine", "no --kv-events-config with "
                       "enable_kv_cache_events", "", "kv_events_off", restart=restart(facts, [inst.instance], "engine"))


# Field failures of installed versions, each warned before it happens (the catalogue's cause cites the upstream
# thread): Mooncake's TCP transport rejects the first transfer after a few seconds idle (Mooncake #4209); NIXL
# throughput drops once one registered L1 region passes ~4 GiB on RDMA (LMCache PR #4432, open in 0.5.6).
MOONCAKE_TCP_IDLE = ("0.3.13.post1", "0.3.14rc1")
NIXL_MR_CLIFF_GB = 4.0


def _setting(inst: InstanceFacts, key: str) -> Optional[str]:
    """What the running server was started with, else its env.sh."""
    return inst.process_env.get(key) or (inst.env_file or {}).get(key)


def _number(value: Optional[str]) -> Optional[float]:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _known(report: Report, subject: str, seen: str, cause: str) -> None:
    c = CAUSES[cause]
    report.add("warn", "known_issue", subject, seen, f"{c.means} (known issue: {c.upstream}; affects {c.affects})",
               cause)


def _check_known_issues(report: Report, facts: FleetFacts) -> None:
    rdma, _ = rdma_expected(facts)
    keep_alive = _number((facts.coordinator_env or {}).get("LMCACHE_MP_COORDINATOR_TIMEOUT_KEEP_ALIVE"))
    beats = {i.instance: b for i in facts.instances
             if (b := _number(_setting(i, "LMCACHE_COORDINATOR_HEARTBEAT_INTERVAL"))) is not None}
    if keep_alive is not None and beats and keep_alive <= max(beats.values()):
        report.add("error", "keep_alive", "coordinator", f"coordinator keep-alive {keep_alive:g} s, heartbeat "
                   f"interval {pairs({k: f'{v:g} s' for k, v in beats.items()})}", "", "keepalive_short")
    for inst in facts.instances:
        node = facts.node(inst.node)
        mooncake = version_of(node.packages, "mooncake") if node else None
        protocol = _setting(inst, "MC_TE_PROTOCOL") or "tcp"
        if facts.transfer_engine == "mooncake_te" and protocol == "tcp" and mooncake in MOONCAKE_TCP_IDLE:
            _known(report, inst.instance, f"mooncake {mooncake}, MC_TE_PROTOCOL=tcp", "mooncake_tcp_idle")
        l1 = _number(_setting(inst, "LMCACHE_L1_SIZE_GB"))
        if facts.transfer_engine == "nixl" and rdma and l1 is not None and l1 > NIXL_MR_CLIFF_GB:
            _known(report, inst.instance, f"l1_size_gb {l1:g} over RDMA, lmcache "
                   f"{inst.lmc_version or version_of(node.packages if node else {}, 'lmcache') or '?'}",
                   "nixl_l1_over_4gib")


def check(facts: FleetFacts) -> Report:
    """Judge gathered facts (pure). A stopped fleet gets the pre-launch subset."""
    mode = "running" if facts.any_running else "stopped (pre-launch checks)"
    report = Report(f"fleet doctor: {facts.fleet} ({mode})", source="doctor")
    for n in facts.nodes:
        if n.error:
            report.add("error", "node", n.node, n.address, f"cannot read node {n.node}: {n.error}", "node_unreadable",
                       node=n.node)
    if facts.nodes and all(n.error for n in facts.nodes):
        report.could_not_check = "no node could be read"
        return report
    for inst in facts.instances:
        if inst.env_file_rendered:
            report.add("info", "env_file", inst.instance, "missing", "", "env_not_rendered")
    per_inst = check_agreement(report, facts)
    _check_hash_fallback(report, facts)
    _check_mooncake(report, facts)
    _check_ports(report, facts)
    _check_binds(report, facts)
    _check_ucx_tls(report, facts)
    _check_nic_pin(report, facts)
    _check_start_refusals(report, facts)
    _check_known_issues(report, facts)
    if facts.any_running:
        _check_processes(report, facts)
        _check_coordinator(report, facts)
        _check_reach(report, facts)
        _check_memlock(report, facts)
        _check_engines(report, facts)
        _check_kv_events(report, facts)
        _check_router(report, facts)
        check_lookup_leak(report, facts)
    report.facts["mode"] = mode
    report.facts["instances"] = {i.instance: {k: v for k, (v, _) in per_inst[i.instance].items()} | {
        "server": i.server_state, "p2p_state": (i.status or {}).get("p2p_state")} for i in facts.instances}
    return report
