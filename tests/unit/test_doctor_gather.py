"""The doctor's gather (`diagnose.doctor.gather`) on a 2-node fleet reached through scripted fakes: each
node's batched read parses into its facts, HTTP comes from real loopback servers, and a node that cannot be
reached is a fact, never an exception."""

from __future__ import annotations

import json

from p2p_ops.diagnose import doctor as D
from p2p_ops.diagnose.doctor.gather import doctor_batch, gather, watched_procs
from p2p_ops.facts.listeners import Listener
from tests.support.fake_connector import node_read, pid_states, serve, unreachable

PYTHON = json.dumps({"python": "3.11.7", "executable": "/v/bin/python",
                     "packages": {"lmcache": "0.5.6", "nixl-cu12": "1.5.1", "vllm": None}})
STATUS = {"is_healthy": True, "chunk_size": 256, "hash_algorithm": "blake3", "p2p_enabled": True,
          "p2p_state": "registered", "p2p_peer_count": 1}
ENV_SH = "export PYTHONHASHSEED=0\nexport LMCACHE_CHUNK_SIZE=256\nexport HF_TOKEN=hf_PLANTEDaaaaBBBBccccDDDD1234\n"
RUNNING = {"coordinator/coordinator": 100, "node-a-0/server": 101, "node-a-0/engine": 102}


def expected_batch(ctx, node, running: dict[str, int], members=None):
    """What gather reads on `node` once it knows which processes run (and, from the coordinator, who is
    registered): the same builder, fed the facts gather has by then."""
    seen = D.FleetFacts(ctx.fleet.name, ctx.fleet.runtime, ctx.fleet.coordinator_url, "node-a",
                        coordinator_state="running" if "coordinator/coordinator" in running else "none",
                        coordinator_instances=members, proc_states={name: "running" for name in running})
    return doctor_batch(ctx, node, seen, running, reach=True)


def test_an_unreachable_node_becomes_its_node_facts_error(fakes):
    fleet = fakes.fleet(2, {"node-b": [unreachable("node-b")]})
    ctx = fleet.ctx
    node_a = ctx.fleet.nodes[0]
    fleet["node-a"].expect(pid_states(watched_procs(ctx, node_a)),
                           node_read(expected_batch(ctx, node_a, {}), {"python": PYTHON, "env node-a-0": ENV_SH}))
    facts = gather(ctx)
    a, b = facts.nodes
    assert (a.node, a.error, a.packages["lmcache"]) == ("node-a", None, "0.5.6")
    assert b.node == "node-b" and b.error.startswith("node-b (root@node-b:22): unreachable: connection refused")
    ia, ib = facts.instances
    assert (ia.server_state, ib.server_state) == ("none", "unknown")
    assert ia.env_file == {"PYTHONHASHSEED": "0", "LMCACHE_CHUNK_SIZE": "256"} and not ia.env_file_rendered
    assert ib.env_file_rendered and ib.env_file["PYTHONHASHSEED"] == "0"  # the spec's rendering stands in
    [f] = [f for f in D.check(facts).findings if f.check == "node"]
    assert f.severity == "error" and f.subject == "node-b" and "cannot read node node-b" in f.message


def test_the_batched_read_of_a_running_node_parses_into_its_facts(fakes):
    fleet = fakes.fleet(2)
    ctx = fleet.ctx
    node_a, node_b = ctx.fleet.nodes
    server = ctx.unit("server", "node-a-0")
    p2p, mq = server.instance.ports.p2p, server.instance.ports.mp
    members = [{"instance_id": "node-a-0", "ip": "127.0.0.1", "p2p_advertised_url": f"127.0.0.1:{p2p}",
                "mq_port": mq}]
    batch_a = expected_batch(ctx, node_a, RUNNING, members)
    assert {"nonehash node-a-0", "limits node-a-0", "server_env node-a-0", "engine_env node-a-0",
            "reach"} <= set(batch_a)
    coord = ctx.fleet.coordinator.port
    fleet["node-a"].expect(
        pid_states(watched_procs(ctx, node_a), RUNNING),
        node_read(batch_a, {
            "python": PYTHON, "rdma": "",
            "listeners": f'LISTEN 0 128 127.0.0.1:{coord} 0.0.0.0:* users:(("lmcache",pid=100,fd=7))\n'
                         f'LISTEN 0 128 0.0.0.0:{p2p} 0.0.0.0:* users:(("lmcache",pid=4210,fd=31))',
            "sessions": "100 100\n101 101\n4210 101\n102 102",
            "env node-a-0": ENV_SH, "env coordinator": "export LMCACHE_MP_COORDINATOR_CHUNK_SIZE=256\n",
            "nonehash node-a-0": "\x1b[32m[2026-11-30] LMCache INFO: Computed NONE_HASH=b'abc' using blake3\x1b[0m",
            "hashfallback node-a-0": (1, ""),
            "limits node-a-0": "Max locked memory         65536                65536                bytes",
            "server_env node-a-0": "PYTHONHASHSEED=0\nLMCACHE_CHUNK_SIZE=256",
            "engine_env node-a-0": "P2P_ENGINE_MODEL_SEED=0\nP2P_ENGINE_NUM_LAYERS=4",
            "reach": f"ok 127.0.0.1 {coord} coordinator\nfail 127.0.0.1 {p2p} node-a-0 p2p"}))
    fleet["node-b"].expect(pid_states(watched_procs(ctx, node_b)),
                           node_read(expected_batch(ctx, node_b, RUNNING, members),
                                     {"python": PYTHON, "env node-b-0": (1, "cat: env.sh: No such file or directory"),
                                      "reach": f"ok 127.0.0.1 {mq} node-a-0 mq"}))
    with serve(ctx.fleet.coordinator_url, {"/healthz": {"status": "healthy"}, "/instances": {"instances": members}}), \
            serve(server.url, {"/status": STATUS, "/config": {"mp": {}}, "/lmc_version": "0.5.6"}):
        facts = gather(ctx)
    a, b = facts.nodes
    assert facts.coordinator_state == "running" and facts.coordinator_healthy and facts.coordinator_instances == members
    assert facts.coordinator_env == {"LMCACHE_MP_COORDINATOR_CHUNK_SIZE": "256"}
    assert a.error is None and a.rdma_devices == 0 and a.packages["nixl-cu12"] == "1.5.1"
    assert a.listeners == [Listener("127.0.0.1", coord, "lmcache", 100), Listener("0.0.0.0", p2p, "lmcache", 4210)]
    assert a.sessions[4210] == 101
    assert a.fleet_pids == {100: "coordinator/coordinator", 101: "node-a-0/server", 102: "node-a-0/engine"}
    assert [(r.target, r.ok) for r in a.reach] == [("coordinator", True), ("node-a-0 p2p", False)]
    assert [(r.source, r.target, r.port) for r in b.reach] == [("node-b", "node-a-0 mq", mq)]
    ia, ib = facts.instances
    assert (ia.server_state, ia.engine_state, ia.pid) == ("running", "running", 101)
    assert ia.none_hash == "b'abc'" and ia.hash_fallback is None
    assert ia.memlock["soft"] == 65536 and ia.memlock["source"] == "/proc/101/limits"
    assert ia.env_file == {"PYTHONHASHSEED": "0", "LMCACHE_CHUNK_SIZE": "256"}  # no HF_TOKEN: never kept
    assert ia.process_env["PYTHONHASHSEED"] == "0" and ia.process_env["UCX_TLS"] is None
    assert ia.engine_env == {"P2P_ENGINE_MODEL_SEED": "0", "P2P_ENGINE_NUM_LAYERS": "4", "P2P_ENGINE_NUM_HEADS": None,
                             "P2P_ENGINE_HEAD_SIZE": None, "P2P_ENGINE_PROFILE": None}
    assert ia.status["p2p_state"] == "registered" and ia.config == {"mp": {}} and ia.lmc_version == "0.5.6"
    assert (ib.server_state, ib.status, ib.none_hash) == ("none", None, None) and ib.env_file_rendered
    # The wide listener is the server's child (session 101): the doctor names it.
    assert [(f.subject, f.value) for f in D.check(facts).problems if f.check == "bind:wide"] == [
        ("node-a-0/server on node-a", f"0.0.0.0:{p2p} (pid 4210)")]
