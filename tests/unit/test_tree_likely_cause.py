"""The tree's likely cause rests on the most specific evidence, and checks that do not apply to a fleet say so.

Issue 28's case: a local fleet whose server died with NIXL_ERR_BACKEND under `UCX_TLS=rc,cuda_copy` (no RDMA
device). The dead process and its Traceback come first in the tree, but they say only *that* it failed; the
likely cause must be the UCX_TLS finding, and "no RDMA device" is no problem on a fleet that is TCP by design.
"""

from __future__ import annotations

from p2p_ops.diagnose import judge
from p2p_ops.diagnose.doctor.checks import check
from p2p_ops.diagnose.doctor.model import FleetFacts, InstanceFacts, NodeFacts
from p2p_ops.diagnose.tree import evidence, model, render, walk
from p2p_ops.facts.reach import Reach

TREE = model.load_tree()


class _Given(evidence.Evidence):
    """Evidence whose doctor facts are given (no fleet to read), plus --log files."""

    def __init__(self, facts: FleetFacts, logs=()):
        super().__init__(None, TREE, tuple(logs))
        self._given = (facts, check(facts))

    def doctor(self):
        return self._given


def _fleet(address: str, tls: str, state: str = "dead") -> FleetFacts:
    insts = [InstanceFacts("node-a-0", "node-a", address, env_file={"UCX_TLS": tls}, server_state=state),
             InstanceFacts("node-b-0", "node-b", address, env_file={"UCX_TLS": tls}, server_state="running",
                           pid=42, process_env={"UCX_TLS": tls})]
    nodes = [NodeFacts("node-a", address, rdma_devices=0), NodeFacts("node-b", address, rdma_devices=0)]
    return FleetFacts("f", "embedded", f"http://{address}:9300", "node-a", coordinator_state="running",
                      coordinator_healthy=True, coordinator_instances=[], instances=insts, nodes=nodes)


def _log(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("Traceback (most recent call last):\n  File \"x.py\", line 1\n"
                   "nixl_cu12._bindings.nixlBackendError: NIXL_ERR_BACKEND\n")
    return log


def test_the_setting_beats_the_dead_process_as_the_likely_cause(tmp_path):
    d = walk.diagnose(TREE, model.find_symptom(TREE, "server exits with NIXL_ERR_BACKEND"),
                      _Given(_fleet("127.0.0.1", "rc,cuda_copy"), [_log(tmp_path)]))
    steps = {s.id: s for s in d.steps}
    assert steps["server-alive"].verdict == "problem"      # found, but it is the symptom, not the why
    step, obs = d.likely()
    assert (step.id, obs.check) == ("ucx-tls", "doctor:ucx_tls"), render.render_text(d)
    assert "asks for RDMA transports but node" in obs.detail and obs.cause.id == "tls_unavailable"
    cause = d.to_dict()["likely_cause"]
    assert cause["evidence"] == "doctor:ucx_tls" and cause["cause"]["id"] == "tls_unavailable"
    assert "mooncake" not in cause["detail"] + cause["cause"]["fix"]
    assert "mooncake" not in render.render_text(d)[-2]


def test_rdma_readiness_is_not_applicable_on_a_loopback_fleet(tmp_path):
    d = walk.diagnose(TREE, model.find_symptom(TREE, "server exits with NIXL_ERR_BACKEND"),
                      _Given(_fleet("127.0.0.1", "rc,cuda_copy"), [_log(tmp_path)]))
    step = next(s for s in d.steps if s.id == "rdma-readiness")
    assert step.verdict == "n/a" and all(o.status == "n/a" for o in step.observations)
    assert "127.0.0.0/8" in step.observations[0].detail
    assert "[not applicable]" in "\n".join(render.render_text(d))


def test_rdma_readiness_is_not_applicable_when_every_server_asks_for_tcp(tmp_path):
    d = walk.diagnose(TREE, model.find_symptom(TREE, "slow pulls"), _Given(_fleet("198.18.0.2", "tcp,sm,self",
                                                                                  state="running")))
    step = next(s for s in d.steps if s.id == "transport")
    assert [o.status for o in step.observations if o.check == "node:rdma"] == ["n/a", "n/a"]


def test_no_rdma_device_is_still_a_problem_where_the_fleet_may_use_rdma():
    d = walk.diagnose(TREE, model.find_symptom(TREE, "single nic"), _Given(_fleet("198.18.0.2", "", state="running")))
    step = next(s for s in d.steps if s.id == "rdma-present")
    assert step.verdict == "problem"


def test_a_stopped_holder_is_the_likely_cause_of_zero_cached_tokens_not_the_engine_it_left_degraded():
    """Issue 28's benchmark: node-a-0's server stopped; its engine reports degraded. The stopped server is the
    cause, the degraded engine its consequence, and the zero-cached-tokens walk reads the processes."""
    facts = _fleet("127.0.0.1", "", state="dead")
    report = check(facts)
    report.add("error", "engine_degraded", "node-a-0/engine", "lmcache unreachable", "degraded", "engine_degraded")
    top = judge.judgement(facts, report).top(["node-a-0"])
    assert (top.check, top.subject) == ("process", "node-a-0/server")
    step = next(st for st in model.find_symptom(TREE, "zero cached tokens").steps if st.id == "registered")
    assert "doctor:process" in step.checks


def test_a_peer_nobody_reaches_at_its_advertised_url_is_the_likely_cause_of_zero_cached_tokens():
    """Issue 28's advertise_url case: node-b-0 advertises 127.0.0.1:9, where nothing listens. node-a-0 sees no
    peer (a state); node-a failing to reach node-b-0's advertised URL, and node-b-0's env.sh no longer rendering
    fleet.yaml's URL, say why. The walk reads both."""
    facts = _fleet("127.0.0.1", "", state="running")
    a, b = facts.instances
    a.pid, a.status = 41, {"p2p_state": "registered", "p2p_peer_count": 0, "p2p_peers": []}
    b.status = {"p2p_state": "registered", "p2p_peer_count": 1, "p2p_peers": ["node-a-0"]}
    b.env_file, b.spec_env = {"LMCACHE_P2P_ADVERTISE_URL": "127.0.0.1:9"}, {"LMCACHE_P2P_ADVERTISE_URL": "127.0.0.1:5702"}
    facts.coordinator_instances = [{"instance_id": "node-a-0", "p2p_advertised_url": "127.0.0.1:5701", "mq_port": 1},
                                   {"instance_id": "node-b-0", "p2p_advertised_url": "127.0.0.1:9", "mq_port": 2}]
    facts.nodes[0].reach = [Reach("node-a", "node-b-0 p2p (advertised)", "127.0.0.1", 9, False)]
    d = walk.diagnose(TREE, model.find_symptom(TREE, "zero cached tokens"), _Given(facts))
    cause = d.to_dict()["likely_cause"]
    assert cause["evidence"] == "doctor:reach" and "node-b-0 p2p (advertised) at 127.0.0.1:9" in cause["detail"]
    assert cause["cause"]["id"] == "peer_unreachable"
    drift = [o for s in d.steps for o in s.observations if o.check == "doctor:env_drift"]
    assert drift and "LMCACHE_P2P_ADVERTISE_URL: env.sh 127.0.0.1:9" in drift[0].detail


def test_an_l1_set_smaller_than_the_spec_is_the_likely_cause_of_l1_oom():
    """Issue 28's l1_too_small case: node-b-0's env.sh set LMCACHE_L1_SIZE_GB=0.002 and its server exited at
    start; the l1_oom walk read only fallback metrics (none: no pull ran) and confirmed nothing."""
    facts = _fleet("127.0.0.1", "")
    a, b = facts.instances
    a.env_file, a.spec_env = {"LMCACHE_L1_SIZE_GB": "0.002"}, {"LMCACHE_L1_SIZE_GB": "1"}
    d = walk.diagnose(TREE, model.find_symptom(TREE, "l1_oom"), _Given(facts))
    cause = d.to_dict()["likely_cause"]
    assert cause["evidence"] == "doctor:env_drift" and "LMCACHE_L1_SIZE_GB: env.sh 0.002" in cause["detail"]
    assert cause["cause"]["id"] == "env_drift" and "--node node-a --role server" in cause["cause"]["fix"]


class _Logged(_Given):
    """Given doctor facts and given server log lines, labelled as the fleet's logs are (<instance>/server.log)."""

    def __init__(self, facts: FleetFacts, lines: dict[str, list[str]]):
        super().__init__(facts)
        self._lines = lines

    def logs(self):
        return [(label, "server", "node-a", lines) for label, lines in self._lines.items()]


# node-a-0's server.log in the diagnosis benchmark (bench/results/diagnosis-2026-12-02b, run b): the advertise_url
# case's handshake to node-c-0's bad URL failed; that case healed node-c, and the evicted case ran next.
ADAPTER_FAILED = ("[2026-12-02 08:19:19,817] LMCache ERROR: Failed to add P2P adapter for peer node-c-0 "
                  "(p2p_controller.py:596:lmcache.v1.multiprocess.modules.p2p_controller)")


def _meshed() -> FleetFacts:
    """Two running servers, registered, each listing the other."""
    facts = _fleet("127.0.0.1", "", state="running")
    a, b = facts.instances
    a.pid, a.status = 41, {"p2p_state": "registered", "p2p_peer_count": 1, "p2p_peers": ["node-b-0"]}
    b.status = {"p2p_state": "registered", "p2p_peer_count": 1, "p2p_peers": ["node-a-0"]}
    facts.coordinator_instances = [{"instance_id": i, "p2p_advertised_url": f"127.0.0.1:570{n}", "mq_port": n}
                                   for n, i in enumerate(("node-a-0", "node-b-0"), 1)]
    return facts


def test_an_adapter_failure_for_a_peer_connected_now_is_ruled_out():
    """Issue 28's evicted case: the zero-cached-tokens walk named an earlier case's adapter failure (for node-c-0,
    since reconnected) as the likely cause. The peer it names being connected now rules it out; a failure for a
    peer still missing stays a problem."""
    facts = _meshed()
    line = ADAPTER_FAILED.replace("node-c-0", "node-b-0")
    d = walk.diagnose(TREE, model.find_symptom(TREE, "zero cached tokens"), _Logged(facts, {"node-a-0/server.log": [line]}))
    [obs] = [o for s in d.steps for o in s.observations if o.check == "log:adapter_failed"]
    assert obs.status == "info" and "ruled out" in obs.detail and d.likely() is None
    d = walk.diagnose(TREE, model.find_symptom(TREE, "zero cached tokens"),
                      _Logged(facts, {"node-a-0/server.log": [ADAPTER_FAILED]}))
    cause = d.to_dict()["likely_cause"]
    assert cause["evidence"] == "log:adapter_failed" and cause["cause"]["id"] == "adapter_failed"
    assert cause["cause"]["subject"] == "node-a-0" and "node-a-0/server.log" in cause["cause"]["fix"]


class _Scraped(_Given):
    """Given doctor facts and given /metrics samples per running server."""

    def __init__(self, facts: FleetFacts, samples: dict[str, list]):
        super().__init__(facts)
        self._samples = samples

    def running_servers(self):
        return [(None, type("I", (), {"id": iid})(), iid) for iid in self._samples]

    def metrics(self, url):
        return self._samples[url]


def test_an_l1_that_evicted_is_the_likely_cause_of_zero_cached_tokens_when_nothing_more_specific_is_seen():
    """Issue 28's evicted case: node-a's L1 was filled until it evicted the prefix; the fleet is otherwise healthy.
    The walk named an earlier run's explanation by a keyword; the eviction counters are the evidence."""
    facts = _meshed()
    evicted = [("lmcache_mp_l1_evicted_chunks_total", {}, 120.0),
               ("lmcache_mp_l1_eviction_loop_triggered_total", {}, 3.0)]
    d = walk.diagnose(TREE, model.find_symptom(TREE, "zero cached tokens"),
                      _Scraped(facts, {"node-a-0": evicted, "node-b-0": []}))
    cause = d.to_dict()["likely_cause"]
    assert cause["evidence"] == "metric:l1_evictions" and "node-a-0" in cause["detail"], cause
    assert "eviction loop ran 3 time(s) since it started (120 chunks deleted)" in cause["detail"]
    assert cause["cause"]["id"] == "evicted" and "l1_size_gb" in cause["cause"]["fix"]
    # Pulled chunks freed after their read count as evicted chunks too: without an eviction pass, no eviction.
    pulled = [("lmcache_mp_l1_evicted_chunks_total", {}, 8.0)]
    d = walk.diagnose(TREE, model.find_symptom(TREE, "zero cached tokens"),
                      _Scraped(facts, {"node-a-0": [], "node-b-0": pulled}))
    assert d.likely() is None


# node-a-0's server.log on a local fleet whose coordinator was restarted with a keep-alive equal to the servers'
# 2 s heartbeat (LMCache PR #3876's failure, reproduced with lmcache 0.5.6): the restart's refusals, then the flap.
RESTART_REFUSED = ("[2026-12-06 19:55:29,649] LMCache WARNING: Coordinator registration/heartbeat failed: All "
                   "connection attempts failed (registrar.py:154:lmcache.v1.mp_coordinator.registrar)")
KEEPALIVE_FLAP = ("[2026-12-06 19:56:13,887] LMCache WARNING: Coordinator registration/heartbeat failed: Server "
                  "disconnected without sending a response. (registrar.py:154:lmcache.v1.mp_coordinator.registrar)")


def _keep_alive(facts: FleetFacts, seconds: str) -> FleetFacts:
    for i in facts.instances:
        i.process_env["LMCACHE_COORDINATOR_HEARTBEAT_INTERVAL"] = "2.0"
    facts.coordinator_env = {"LMCACHE_MP_COORDINATOR_TIMEOUT_KEEP_ALIVE": seconds}
    return facts


def test_a_keep_alive_at_the_heartbeat_is_the_likely_cause_of_flapping_registration_not_its_log_lines():
    """The flap's lines also read 'registration/heartbeat failed', as the restart's refusals do; the setting the
    doctor finds is the reason, and it outranks the generic failure."""
    logs = {"node-a-0/server.log": [RESTART_REFUSED, KEEPALIVE_FLAP]}
    d = walk.diagnose(TREE, model.find_symptom(TREE, "peers not registered"), _Logged(_keep_alive(_meshed(), "2"), logs))
    step, obs = d.likely()
    assert obs.cause.id == "keepalive_short" and step.id == "registration-errors", render.render_text(d)


def test_keep_alive_disconnects_logged_before_the_setting_was_fixed_confirm_nothing():
    """A frozen coordinator on a fleet whose keep-alive was fixed earlier: the old disconnect lines stay in the
    servers' logs. Read alone they named keepalive_short for 'requests stall'; the setting rules them out now."""
    facts = _keep_alive(_meshed(), "10")
    facts.coordinator_healthy = False
    d = walk.diagnose(TREE, model.find_symptom(TREE, "requests stall"),
                      _Logged(facts, {"node-a-0/server.log": [KEEPALIVE_FLAP]}))
    [obs] = [o for s in d.steps for o in s.observations if o.check == "log:keepalive_disconnect"]
    assert obs.status == "info" and "does not find keepalive_short now" in obs.detail
    assert d.likely()[1].cause.id == "coordinator_down", render.render_text(d)
