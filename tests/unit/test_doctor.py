"""The fleet doctor's judgement (pure, on hand-built facts) and its gathering helpers."""

from __future__ import annotations

import socket

import pytest

from p2p_ops.connectors import LocalConnector
from p2p_ops.diagnose import doctor as D
from p2p_ops.diagnose.doctor.gather import fill_node
from p2p_ops.diagnose.judge import judgement
from p2p_ops.facts import node_facts
from p2p_ops.facts.envfile import env_file_fact, read_env_sh
from p2p_ops.facts.listeners import Listener, parse_listeners, parse_sessions
from p2p_ops.facts.reach import reach_fact
from p2p_ops.facts.sections import read_node
from p2p_ops.facts.server_log import parse_hash_fallback

STATUS = {"is_healthy": True, "chunk_size": 256, "hash_algorithm": "blake3", "p2p_enabled": True,
          "p2p_state": "registered", "p2p_peer_count": 1,
          "non_cuda_context_meta": {"11": {"model_name": "tiny-llm", "world_size": 1}}}
CONFIG = {"mp": {"p2p_config": {"transfer_engine": "nixl"}},
          "storage_manager": {"l1_manager_config": {"memory_config": {"align_bytes": 65536}}}}
COORD = "http://127.0.0.1:9300"


def env(**over) -> dict:
    base = {"PYTHONHASHSEED": "0", "LMCACHE_CHUNK_SIZE": "256", "LMCACHE_HASH_ALGORITHM": "blake3",
            "LMCACHE_L1_ALIGN_BYTES": "65536", "LMCACHE_P2P_TRANSFER_ENGINE": "nixl", "P2P_MODEL": "tiny-llm",
            "LMCACHE_COORDINATOR_URL": COORD, "UCX_TLS": None, "UCX_NET_DEVICES": None}
    base.update(over)
    return base


def inst(name: str, running: bool = True, status: dict | None = None, proc_env: dict | None = None,
         env_file: dict | None = None, **kw) -> D.InstanceFacts:
    node = "node-" + name[5]
    pe = proc_env if proc_env is not None else env(LMCACHE_P2P_ADVERTISE_URL=f"127.0.0.1:855{name[5]}")
    ef = env_file if env_file is not None else {k: v for k, v in pe.items() if v is not None}
    return D.InstanceFacts(name, node, "127.0.0.1", env_file=ef, server_state="running" if running else "none",
                           engine_state="running" if running else "none", pid=100 if running else None,
                           process_env=pe if running else {}, status=(status or dict(STATUS)) if running else None,
                           config=CONFIG if running else None, lmc_version="0.5.6" if running else None, **kw)


def node(name: str, **kw) -> D.NodeFacts:
    kw.setdefault("packages", {"lmcache": "0.5.6", "nixl": "1.5.1", "vllm": None})
    kw.setdefault("rdma_devices", 0)
    return D.NodeFacts(name, "127.0.0.1", **kw)


def fleet(instances, running=True, **kw) -> D.FleetFacts:
    kw.setdefault("coordinator_state", "running" if running else "none")
    kw.setdefault("coordinator_healthy", running)
    listed = [{"instance_id": i.instance, "ip": "127.0.0.1", "p2p_advertised_url": f"127.0.0.1:855{i.instance[5]}",
               "mq_port": 5600 + ord(i.instance[5])} for i in instances if i.running]
    kw.setdefault("coordinator_instances", listed if running else None)
    kw.setdefault("nodes", [node(f"node-{i.instance[5]}") for i in instances])
    return D.FleetFacts("t", "embedded", COORD, "node-a", instances=list(instances), **kw)


def problems(report, check=None):
    return [f for f in report.problems if check is None or f.check == check]


def test_healthy_running_fleet_exits_0():
    rep = D.check(fleet([inst("node-a-0"), inst("node-b-0")]))
    assert rep.exit_code == 0, rep.render()
    assert rep.facts["agreed"]["chunk_size"] == "256" and rep.facts["agreed"]["model"] == "tiny-llm"
    assert rep.facts["instances"]["node-b-0"]["world_size"] == "1"


def test_pythonhashseed_mismatch_with_builtin_hash_names_instances_and_values():
    st = dict(STATUS, hash_algorithm="builtin")
    a = inst("node-a-0", status=st, proc_env=env(LMCACHE_HASH_ALGORITHM="builtin"))
    b = inst("node-b-0", status=st, proc_env=env(LMCACHE_HASH_ALGORITHM="builtin", PYTHONHASHSEED="4242"))
    rep = D.check(fleet([a, b]))
    [f] = problems(rep, "agree:PYTHONHASHSEED")
    assert f.severity == "error" and f.subject == "node-a-0, node-b-0"
    assert f.value == "node-a-0=0, node-b-0=4242" and "share nothing" in f.message
    assert "python_hash_seed" in f.fix and rep.exit_code == 1


def test_pythonhashseed_mismatch_is_only_a_warning_with_blake3_and_no_vllm():
    rep = D.check(fleet([inst("node-a-0"), inst("node-b-0", proc_env=env(PYTHONHASHSEED="7"))]))
    [f] = problems(rep, "agree:PYTHONHASHSEED")
    assert f.severity == "warn" and "Harmless today" in f.message
    assert "node-a-0=blake3, node-b-0=blake3" in f.message  # reasoned from what each instance runs


def test_blake3_ignores_the_seed_even_where_vllm_is_installed():
    # LMCache 0.5.6 (multiprocess/token_hasher.py) takes blake3 from the blake3 package and computes NONE_HASH
    # itself for blake3: neither vLLM nor PYTHONHASHSEED enters it.
    facts = fleet([inst("node-a-0"), inst("node-b-0", proc_env=env(PYTHONHASHSEED="7"))])
    facts.nodes[1].packages["vllm"] = "0.11.0"
    [f] = problems(D.check(facts), "agree:PYTHONHASHSEED")
    assert f.severity == "warn"


def test_pythonhashseed_mismatch_is_an_error_where_an_instance_really_runs_builtin():
    """The spec and /status say blake3 on node-a-0, but its log says LMCache fell back to the builtin hash."""
    a = inst("node-a-0", hash_fallback="sha256_cbor")
    facts = fleet([a, inst("node-b-0", proc_env=env(PYTHONHASHSEED="7"))])
    rep = D.check(facts)
    [f] = problems(rep, "agree:PYTHONHASHSEED")
    assert f.severity == "error" and "node-a-0 hash(es) with Python's builtin hash" in f.message
    [fb] = problems(rep, "hash:builtin_fallback")
    assert fb.severity == "error" and fb.subject == "node-a-0" and fb.value == "node-a-0=sha256_cbor"
    assert "blake3" in fb.fix


def test_hash_fallback_line_is_recognised():
    line = ("[2026-11-30 21:00:01,123] LMCache WARNING: Could not load 'builtin' from vLLM. Using builtin hash. "
            "This may cause inconsistencies in distributed caching. (token_hasher.py:112:lmcache)")
    assert parse_hash_fallback(line) == "builtin"
    assert parse_hash_fallback("Using blake3 hash function") is None
    # Equal seeds do not save a fleet that falls back: the doctor says so without any seed mismatch.
    rep = D.check(fleet([inst("node-a-0", hash_fallback="builtin"), inst("node-b-0", hash_fallback="builtin")]))
    [fb] = problems(rep, "hash:builtin_fallback")
    assert fb.subject == "node-a-0, node-b-0" and rep.exit_code == 1


def test_chunk_size_from_status_and_the_coordinator_are_compared():
    b = inst("node-b-0", status=dict(STATUS, chunk_size=512), proc_env=env(LMCACHE_CHUNK_SIZE="512"))
    facts = fleet([inst("node-a-0"), b], coordinator_env={"LMCACHE_MP_COORDINATOR_CHUNK_SIZE": "256"})
    [f] = problems(D.check(facts), "agree:chunk_size")
    assert f.value == "coordinator=256, node-a-0=256, node-b-0=512" and "/status" in f.message


@pytest.mark.parametrize("key,edit", [
    ("model", {"status": dict(STATUS, non_cuda_context_meta={"1": {"model_name": "other", "world_size": 1}})}),
    ("world_size", {"status": dict(STATUS, cache_context_meta={"0": {"model_name": "tiny-llm", "world_size": 2}},
                                   non_cuda_context_meta={})}),
    ("NONE_HASH", {"none_hash": "b'zz'"}),
    ("lmcache_version", {"lmc_version": "0.5.5"}),
    ("l1_align_bytes", {"config": {"storage_manager": {"l1_manager_configs": [
        {"memory_config": {"align_bytes": 4096}}]}}}),
])
def test_other_must_agree_keys(key, edit):
    a = inst("node-a-0", none_hash="b'aa'") if key == "NONE_HASH" else inst("node-a-0")
    b = inst("node-b-0")
    for k, v in edit.items():
        setattr(b, k, v)
    found = problems(D.check(fleet([a, b])), f"agree:{key}")
    assert len(found) == 1 and found[0].severity == "error" and "node-b-0" in found[0].value


def test_env_sh_edited_after_start_is_reported():
    b = inst("node-b-0", env_file={"PYTHONHASHSEED": "99", "LMCACHE_COORDINATOR_URL": COORD})
    [f] = problems(D.check(fleet([inst("node-a-0"), b])), "stale_env")
    assert f.subject == "node-b-0" and "process PYTHONHASHSEED=0, env.sh PYTHONHASHSEED=99" == f.value


def test_stopped_coordinator_is_an_error():
    facts = fleet([inst("node-a-0"), inst("node-b-0")], coordinator_state="none", coordinator_healthy=False,
                  coordinator_instances=None)
    [f] = problems(D.check(facts), "coordinator")
    assert "not running" in f.message and "p2pctl down --node node-a --role coordinator && p2pctl up --node node-a --role coordinator" in f.fix


def test_server_pointing_at_another_coordinator_is_named():
    bad = "http://127.0.0.1:1"
    b = inst("node-b-0", status=dict(STATUS, p2p_state="unregistered", p2p_peer_count=0),
             proc_env=env(LMCACHE_COORDINATOR_URL=bad))
    facts = fleet([inst("node-a-0", status=dict(STATUS, p2p_peer_count=0)), b])
    facts.coordinator_instances = [e for e in facts.coordinator_instances if e["instance_id"] != "node-b-0"]
    rep = D.check(facts)
    [url] = problems(rep, "coordinator_url")
    assert url.subject == "node-b-0" and bad in url.value and COORD in url.fix
    assert {f.subject for f in problems(rep, "registration")} == {"node-b-0"}
    assert {f.subject for f in problems(rep, "p2p_state")} == {"node-b-0"}
    assert {f.subject for f in problems(rep, "peer_count")} == {"node-a-0"}


def test_membership_entries_without_url_and_foreign_instances():
    facts = fleet([inst("node-a-0"), inst("node-b-0")])
    facts.coordinator_instances[1]["mq_port"] = 0
    facts.coordinator_instances.append({"instance_id": "stranger", "p2p_advertised_url": "10.0.0.9:1"})
    rep = D.check(facts)
    msgs = {(f.subject, f.severity) for f in problems(rep, "registration")}
    assert msgs == {("node-b-0", "error"), ("stranger", "warn")}


def test_unreachable_target_is_named_with_source_and_address():
    facts = fleet([inst("node-a-0"), inst("node-b-0")])
    facts.nodes[0].reach = [D.Reach("node-a", "node-b-0 p2p", "127.0.0.1", 8552, False),
                            D.Reach("node-a", "coordinator", "127.0.0.1", 9300, True)]
    [f] = problems(D.check(facts), "reach")
    assert f.subject == "node-a -> node-b-0 p2p" and f.value == "127.0.0.1:8552"


def test_a_dead_server_still_listed_is_named_dead_not_unreachable():
    """SIGKILL leaves no deregistration: the coordinator lists the server until it drops it, and every peer's
    connect to it fails; that is the dead process's consequence, not a network cause ranked above it."""
    dead = inst("node-b-0")
    dead.server_state, dead.status = "dead", None
    facts = fleet([inst("node-a-0"), dead])
    facts.nodes[0].reach = [D.Reach("node-a", "node-b-0 p2p", "127.0.0.1", 8552, False)]
    report = D.check(facts)
    assert not problems(report, "reach") and judgement(facts, report).cause().id == "server_down", report.render()


def test_ports_busy_before_launch_and_silent_after():
    a, b = inst("node-a-0", running=False), inst("node-b-0", running=False)
    ports = [D.PlannedPort("node-a", 8081, "node-a-0 http", "127.0.0.1", "node-a-0", "http", "node-a-0/server"),
             D.PlannedPort("node-b", 8082, "node-b-0 http", "127.0.0.1", "node-b-0", "http", "node-b-0/server")]
    facts = fleet([a, b], running=False, ports=ports)
    rep = D.check(facts)
    assert rep.exit_code == 0 and [f.check for f in rep.findings] == ["ports"]  # every planned port is free
    facts.nodes[1].listeners = [Listener("0.0.0.0", 8082, "python", 4321)]
    [f] = problems(D.check(facts), "port_busy")
    assert f.subject == "node-b-0 http" and "pid 4321" in f.value and "not running" in f.message


def test_running_process_must_listen_on_its_ports():
    ports = [D.PlannedPort("node-a", 8081, "node-a-0 http", "127.0.0.1", "node-a-0", "http", "node-a-0/server")]
    facts = fleet([inst("node-a-0"), inst("node-b-0")], ports=ports,
                  proc_states={"node-a-0/server": "running"})
    [f] = problems(D.check(facts), "port_listening")
    assert f.subject == "node-a-0 http"
    facts.nodes[0].listeners = [Listener("127.0.0.1", 8081, "", None)]
    assert not problems(D.check(facts), "port_listening")


def test_memlock_is_an_error_only_where_rdma_is_used():
    lim = {"soft": 65536, "hard": 65536, "source": "/proc/100/limits", "error": None}
    facts = fleet([inst("node-a-0", memlock=lim), inst("node-b-0", memlock=lim)])
    assert not problems(D.check(facts), "memlock")
    assert [f.severity for f in D.check(facts).findings if f.check == "memlock"] == ["info", "info"]
    facts.nodes[0].rdma_devices = 2
    [f] = problems(D.check(facts), "memlock")
    assert f.subject == "node-a-0" and "65536 bytes" in f.value and "ulimit -l unlimited" in f.fix


@pytest.mark.parametrize("tls,severity,cause", [
    ("cuda_ipc,cuda_copy", "error", "tls_unavailable"),
    ("tcp,cuda_copy", "warn", "tls_cuda_without_gpu"),
    ("tcp,^cuda_ipc", "error", "tls_caret"),
    ("rc,sm,self", "error", "tls_unavailable"),
    ("sm,self", "error", "tls_no_network"),
])
def test_ucx_tls_for_a_host_dram_l1(tls, severity, cause):
    facts = fleet([inst("node-a-0", proc_env=env(UCX_TLS=tls)), inst("node-b-0")])
    facts.nodes[1].address = "127.0.0.2"  # two hosts: a network transport is needed
    found = problems(D.check(facts), "ucx_tls")
    assert found and found[0].severity == severity and found[0].cause.id == cause and found[0].subject == "node-a-0"
    assert found[0].message and found[0].fix


@pytest.mark.parametrize("tls", ["tcp,sm,self", "^cuda_ipc,cuda_copy", "all"])
def test_sane_ucx_tls_is_fine(tls):
    facts = fleet([inst("node-a-0", proc_env=env(UCX_TLS=tls)), inst("node-b-0", proc_env=env(UCX_TLS=tls))])
    assert not problems(D.check(facts), "ucx_tls")


def test_no_readable_node_means_could_not_check():
    facts = fleet([inst("node-a-0")], nodes=[node("node-a", error="ssh: connection refused")])
    rep = D.check(facts)
    assert rep.exit_code == 2 and "no node" in rep.could_not_check


def test_dead_server_in_a_running_fleet():
    dead = inst("node-b-0", running=False)
    dead.server_state = "dead"
    [f] = problems(D.check(fleet([inst("node-a-0"), dead])), "process")
    assert f.subject == "node-b-0/server" and f.value == "dead"


def test_a_server_stopped_cleanly_while_the_fleet_runs_is_named():
    """Issue 28's benchmark: `down --node node-a --role server` leaves no pid file ("none"); the doctor said
    nothing, and its top finding was the engine that server left degraded."""
    stopped = inst("node-b-0", running=False)
    stopped.engine_state = "running"
    [f] = problems(D.check(fleet([inst("node-a-0"), stopped])), "process")
    assert f.subject == "node-b-0/server" and "stopped while the fleet runs" in f.message
    assert f.cause.id == "server_down" and f.cause.subject == "node-b-0/server"
    assert "start it again from fleet.yaml: p2pctl down --node node-b --role server" in f.fix


# ---- helpers ------------------------------------------------------------------------------------------------

def test_read_env_sh_and_safe_env():
    text = ("# comment\nexport PYTHONHASHSEED=0\nexport P2P_MODEL='tiny llm'\nexport UCX_TLS=rc,sm,self\n"
            "export HF_TOKEN=hf_PLANTEDaaaaBBBBccccDDDDeeeeFFFF1234\nexport LMCACHE_S3_SECRET_KEY=PLANTEDx\n"
            "export LMCACHE_AUTH='Bearer PLANTEDtoken0123456789'\nexport PYTHONHASHSEED=7\n")
    env_ = read_env_sh(text).env
    assert env_["P2P_MODEL"] == "tiny llm" and env_["UCX_TLS"] == "rc,sm,self" and env_["PYTHONHASHSEED"] == "7"
    safe = D.safe_env(env_)
    assert "HF_TOKEN" not in safe and "LMCACHE_S3_SECRET_KEY" not in safe
    assert "PLANTED" not in repr(safe) and safe["P2P_MODEL"] == "tiny llm"


def test_observed_prefers_the_running_process_and_names_the_source():
    i = inst("node-a-0", proc_env=env(PYTHONHASHSEED="1"), env_file={"PYTHONHASHSEED": "2"})
    assert D.observed(i, {})["PYTHONHASHSEED"] == ("1", "process")
    i.server_state, i.process_env, i.status, i.config, i.lmc_version = "none", {}, None, None, None
    assert D.observed(i, {})["PYTHONHASHSEED"] == ("2", "env.sh")
    assert D.observed(i, {"lmcache": "0.5.6"})["lmcache_version"] == ("0.5.6", "node python")


def test_node_read_gets_files_packages_and_connects(tmp_path):
    f = tmp_path / "env.sh"
    f.write_text("export PYTHONHASHSEED=3\nexport LD_PRELOAD=$(touch pwned)\n")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    open_port, closed_port = listener.getsockname()[1], closed.getsockname()[1]
    closed.close()
    try:
        import sys

        batch = {**node_facts(("python", "rdma", "listeners", "sessions"), sys.executable),
                 "env node-a-0": env_file_fact(str(f)),
                 "reach": reach_fact("node-a", [("x p2p", "127.0.0.1", open_port),
                                                ("y mq", "127.0.0.1", closed_port)])}
        read = read_node(LocalConnector(), batch, timeout=30)
    finally:
        listener.close()
    assert read["python"].ok and '"lmcache"' in read["python"].output
    facts = D.FleetFacts("t", "embedded", COORD, "node-a", instances=[D.InstanceFacts("node-a-0", "node-a", "x")])
    nf = fill_node(D.NodeFacts("node-a", "127.0.0.1"), batch, read, facts)
    assert nf.error is None and nf.packages["lmcache"]
    assert {(r.target, r.ok) for r in nf.reach} == {("x p2p", True), ("y mq", False)}
    assert any(ln.port == open_port for ln in nf.listeners), nf.listeners  # ss, or /proc/net/tcp without it
    assert facts.instances[0].env_file == {"PYTHONHASHSEED": "3"}
    assert facts.instances[0].env_foreign == ["line 2: export LD_PRELOAD=$(touch pwned)"]


# ---- listening sockets: loopback means loopback -------------------------------------------------------

SS_LISTENERS = """\
LISTEN 0      128        127.0.0.1:9300       0.0.0.0:*    users:(("lmcache",pid=4100,fd=7))
LISTEN 0      128        127.0.0.1:8081       0.0.0.0:*    users:(("lmcache",pid=4200,fd=9))
LISTEN 0      128       172.17.0.2:40123      0.0.0.0:*    users:(("lmcache",pid=4210,fd=31))
LISTEN 0      128          0.0.0.0:8000       0.0.0.0:*    users:(("p2p-engine",pid=4300,fd=12))
LISTEN 0      128        127.0.0.1:8001       0.0.0.0:*    users:(("p2p-engine",pid=4400,fd=12))
LISTEN 0      128          0.0.0.0:22         0.0.0.0:*    users:(("sshd",pid=77,fd=3))
"""


def test_doctor_names_every_fleet_listener_wider_than_loopback():
    n = node("node-a")
    n.listeners = parse_listeners(SS_LISTENERS)
    # 4210 is a thread-owning child of the server (same session 4200); sshd (77) is not the fleet's.
    n.sessions = parse_sessions("4100 4100\n4200 4200\n4210 4200\n4300 4300\n4400 4400\n77 77\n")
    n.fleet_pids = {4100: "coordinator/coordinator", 4200: "node-a-0/server", 4300: "node-a-0/engine",
                    4400: "node-b-0/engine"}
    n.bind_ok = ("loopback",)
    rep = D.check(fleet([inst("node-a-0"), inst("node-b-0")], nodes=[n, node("node-b")]))
    wide = sorted((f.subject, f.value) for f in problems(rep, "bind:wide"))
    assert wide == [("node-a-0/engine on node-a", "0.0.0.0:8000 (pid 4300)"),
                    ("node-a-0/server on node-a", "172.17.0.2:40123 (pid 4210)")]
    ucx = next(f for f in problems(rep, "bind:wide") if "40123" in f.value)
    assert "ucx_net_devices" in ucx.fix and "127.0.0.0/8" in ucx.message


def test_ssh_node_may_listen_on_its_own_address():
    n = node("node-a")
    n.listeners = [Listener("198.18.0.2", 40123, "lmcache", 4200), Listener("198.18.0.9", 40124, "lmcache", 4200)]
    n.sessions, n.fleet_pids = {4200: 4200}, {4200: "node-a-0/server"}
    n.bind_ok = ("loopback", "198.18.0.2", "198.18.0.2")
    assert [w[1] for w in D.wide_binds(n)] == ["198.18.0.9"]


def test_the_router_and_prometheus_are_watched_and_prometheus_may_use_its_spec_address(tmp_path):
    from p2p_ops.diagnose.doctor.gather import watched_procs
    from p2p_ops.lifecycle.context import FleetContext
    from p2p_ops.spec.starter import dump_yaml, local_fleet

    data = local_fleet(2, name="watched")
    data["router"] = {"enabled": True, "policy": "round_robin", "port": 8200, "prometheus_port": 8201}
    path = tmp_path / "fleet.yaml"
    path.write_text(dump_yaml(data))
    with FleetContext.load(path) as ctx:
        first, second = ([p.name for p in watched_procs(ctx, n)] for n in ctx.fleet.nodes)
    assert {"router/router", "prometheus/prometheus", "coordinator/coordinator", "node-a-0/server"} <= set(first)
    assert "prometheus/prometheus" not in second and "router/router" not in second and "node-b-0/engine" in second

    n = node("node-a")
    n.listeners = [Listener("0.0.0.0", 9390, "prometheus", 500), Listener("0.0.0.0", 8200, "vllm-router", 600)]
    n.sessions, n.fleet_pids = {500: 500, 600: 600}, {500: "prometheus/prometheus", 600: "router/router"}
    n.bind_ok = ("loopback",)
    assert [w[0] for w in D.wide_binds(n)] == ["prometheus/prometheus", "router/router"]
    n.proc_binds = {"prometheus/prometheus": ("0.0.0.0",)}  # the spec's prometheus.host: the operator asked for it
    assert [w[0] for w in D.wide_binds(n)] == ["router/router"]


# UCX_TLS advice depends on the node: newer NIXL refuses a UCX_TLS without a CUDA transport when GPUs are present
# (LMCache's P2P skill says UCX_TLS must include cuda_copy), while on a GPU-less node cuda_copy only costs.

def _tls_fleet(tls: str, gpu=None, nixl="1.5.1", topo=""):
    pe = env(UCX_TLS=tls, LMCACHE_P2P_ADVERTISE_URL="127.0.0.1:855a")
    nodes = [node("node-a", packages={"lmcache": "0.5.6", "nixl": nixl}, topo_text=topo, rdma_devices=2)]
    return D.check(fleet([inst("node-a-0", proc_env=pe, gpu=gpu)], nodes=nodes))


def test_cuda_copy_on_a_gpu_node_is_kept():
    rep = _tls_fleet("rc,sm,self,cuda_copy", gpu=0)
    assert problems(rep, "ucx_tls") == [], rep.render()
    assert "drop cuda_copy" not in rep.render()


def test_a_gpu_node_without_a_cuda_transport_is_refused_by_nixl():
    [f] = problems(_tls_fleet("rc,sm,self", topo="\tGPU0\tNIC0\nGPU0\t X \tPIX\n"), "ucx_tls")
    assert f.severity == "error" and f.cause.id == "tls_without_cuda" and "add cuda_copy" in f.fix
    assert "NIXL (>= 1.5.1) refuses it" in f.message
    [f] = problems(_tls_fleet("^cuda_copy", gpu=0), "ucx_tls")
    assert f.severity == "error"
    [f] = problems(_tls_fleet("rc,sm,self", gpu=0, nixl="1.2.0"), "ucx_tls")
    assert f.severity == "warn" and "may refuse" in f.message


def test_a_deny_list_that_keeps_cuda_copy_is_fine_on_a_gpu_node():
    assert problems(_tls_fleet("^cuda_ipc", gpu=0), "ucx_tls") == []


def test_cuda_copy_on_a_gpu_less_node_is_a_warning_naming_the_node():
    [f] = problems(_tls_fleet("tcp,sm,self,cuda_copy"), "ucx_tls")
    assert f.severity == "warn" and f.cause.id == "tls_cuda_without_gpu" and "drop cuda_copy" in f.fix


def test_a_dead_server_and_a_drifted_env_give_one_restart_command():
    dead = inst("node-b-0", env_file={"PYTHONHASHSEED": "7"}, spec_env={"PYTHONHASHSEED": "0"})
    dead.server_state, dead.process_env, dead.status = "dead", {}, None
    rep = D.check(fleet([inst("node-a-0"), dead]))
    cmd = "p2pctl down --node node-b --role server && p2pctl up --node node-b --role server"
    fixes = [f.fix for f in rep.problems if f.subject in ("node-b-0", "node-b-0/server")]
    assert len(fixes) >= 2 and all(cmd in fx for fx in fixes), fixes
    assert not any("--no-render" in fx for fx in fixes)


def test_drift_shows_foreign_env_sh_lines_without_the_secrets_they_hold():
    """A private key pasted into env.sh spans lines that name no secret one by one: the doctor's drift finding
    redacts them as one block (an e2e run showed the PEM body in `doctor --json`)."""
    from p2p_ops.diagnose.doctor.gather import _foreign_lines
    from p2p_ops.facts.envfile import read_env_sh

    pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAPLANTEDxk3Jq1yDq\nPLANTEDzGv9mXQy2xj7d\n-----END RSA PRIVATE KEY-----"
    sh = read_env_sh(f"export A=b\nexport SSH_PRIVATE_KEY=\"{pem}\"\nLD_PRELOAD=/tmp/x.so\n")
    shown = _foreign_lines(sh.foreign)
    assert [s.split(":")[0] for s in shown] == ["line 2", "line 3", "line 4", "line 5", "line 6"]
    assert "PLANTED" not in " ".join(shown) and "line 6: LD_PRELOAD=/tmp/x.so" in shown
