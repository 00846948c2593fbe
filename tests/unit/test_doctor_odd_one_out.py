"""The doctor names the odd one out, env.sh drift from the spec, the smallest fix, degraded engines, the
lookup-job leak and engines without KV events (pure, on hand-built facts)."""

from __future__ import annotations

from p2p_ops.causes import CAUSES
from p2p_ops.diagnose import doctor as D
from p2p_ops.diagnose.judge import judgement
from tests.unit.test_doctor import STATUS, env, fleet, inst, problems


def spec(**over) -> dict:
    return {k: v for k, v in env(**over).items() if v is not None and k.startswith(("PYTHONHASHSEED", "LMCACHE_",
                                                                                    "P2P_", "UCX_"))}


def url(x: str) -> str:
    return f"127.0.0.1:855{x}"


def three(c_chunk: str = "512") -> D.FleetFacts:
    """node-c-0's env.sh was edited to chunk size 512 and its server restarted from it."""
    a = inst("node-a-0", spec_env=spec(LMCACHE_P2P_ADVERTISE_URL=url("a")))
    b = inst("node-b-0", spec_env=spec(LMCACHE_P2P_ADVERTISE_URL=url("b")))
    c_env = env(LMCACHE_CHUNK_SIZE=c_chunk, LMCACHE_P2P_ADVERTISE_URL=url("c"))
    c = inst("node-c-0", status=dict(STATUS, chunk_size=int(c_chunk)), proc_env=c_env,
             spec_env=spec(LMCACHE_P2P_ADVERTISE_URL=url("c")))
    return fleet([a, b, c], coordinator_env={"LMCACHE_MP_COORDINATOR_CHUNK_SIZE": "256"})


def test_the_odd_one_out_is_the_subject_and_the_fix_restarts_only_its_server():
    [f] = problems(D.check(three()), "agree:chunk_size")
    assert f.subject == "node-c-0"
    assert "node-c-0 is the odd one out (coordinator, node-a-0, node-b-0 use 256)" in f.message
    assert f.cause.id == "chunk_size_differs" and f.cause.scope == "fleet"
    assert f.fix.endswith("(chunk_size=256): p2pctl down --node node-c --role server && p2pctl up --node node-c "
                          "--role server")


def test_a_hand_edited_env_sh_is_drift_from_the_spec_on_that_node_only():
    [f] = problems(D.check(three()), "env_drift")
    assert f.subject == "node-c-0" and f.value == "LMCACHE_CHUNK_SIZE: env.sh 512, fleet.yaml renders 256"
    assert "node-c" in f.message and "p2pctl up --node node-c --role server" in f.fix


def test_a_line_p2pctl_does_not_render_is_drift_and_never_read_as_harmless():
    facts = three()
    facts.instances[0].env_foreign = ["line 95: LD_PRELOAD=/tmp/x.so"]
    [f] = [x for x in problems(D.check(facts), "env_drift") if x.subject == "node-a-0"]
    assert f.value == "not rendered by p2pctl: line 95: LD_PRELOAD=/tmp/x.so" and "bash would run it" in f.message


def test_two_peers_have_no_majority_and_both_are_named():
    b = inst("node-b-0", status=dict(STATUS, chunk_size=512), proc_env=env(LMCACHE_CHUNK_SIZE="512"))
    [f] = problems(D.check(fleet([inst("node-a-0"), b])), "agree:chunk_size")
    assert f.subject == "node-a-0, node-b-0" and "odd one" not in f.message


def test_a_degraded_engine_is_in_the_report_with_its_own_log_line():
    line = "LMCache connect to tcp://127.0.0.1:5603 failed: LMCache connect mismatch: server chunk size 512 != 256"
    facts = three()
    facts.instances[2].engine_health, facts.instances[2].engine_log = "degraded", [line]
    [f] = problems(D.check(facts), "engine_degraded")
    assert f.subject == "node-c-0/engine" and f.value == line and "serves without its lmcache server" in f.message


def test_an_engine_that_publishes_no_kv_events_in_a_router_fleet():
    facts = fleet([inst("node-a-0", engine_flags={"kv_events": "on"}),
                   inst("node-b-0", engine_flags={"kv_events": "off"})], kv_events_expected=True)
    [f] = problems(D.check(facts), "kv_events")
    assert f.subject == "node-b-0/engine" and "router.kv_events: true" in f.fix


def _samples(jobs: int, locks: int, to: dict | None = None, n: int = 3) -> list[dict]:
    return [{"t": float(k), "jobs": jobs, "read_locked": locks, "prefetch": 0, "in_flight_to": to or {}}
            for k in range(n)]


def test_lookup_jobs_nobody_waits_for_are_the_named_leak_with_the_fix_that_works_today():
    a = inst("node-a-0", lookup_samples=_samples(15, 120))
    b = inst("node-b-0", lookup_samples=_samples(0, 0, {"node-a-0": 0}))
    [f] = problems(D.check(fleet([a, b])), "lookup_leak")
    assert f.subject == "node-a-0" and "15 P2P lookup job(s)" in f.message and "lmcache 0.5.6" in f.message
    assert "p2p_controller.py" in f.message and "#4691" not in f.message and "30 s" in f.message
    assert f.cause.id == "lookup_leak"
    assert "p2pctl down --node node-a --role server" in f.fix and "--l1-read-ttl-seconds" in f.fix


def test_held_jobs_that_lock_nothing_are_said_but_never_the_cause():
    """The diagnosis benchmark's engine_killed case on a busy box: node-c held 1 abandoned lookup job with 0 read
    locks, and the doctor ranked lookup_leak above the dead engine. Such a job pins no L1 object."""
    a = inst("node-a-0", lookup_samples=_samples(1, 0))
    dead = inst("node-b-0", lookup_samples=_samples(0, 0))
    dead.engine_state = "dead"
    report = D.check(fleet([a, dead]))
    assert not problems(report, "lookup_leak")
    [f] = [f for f in report.findings if f.check == "lookup_leak"]
    assert f.severity == "info" and "pin nothing" in f.message and f.cause is None
    assert judgement(fleet([a, dead]), report).cause().id == "engine_down"


def test_jobs_a_requester_still_waits_for_are_not_a_leak():
    a = inst("node-a-0", lookup_samples=_samples(2, 16))
    b = inst("node-b-0", lookup_samples=_samples(0, 0, {"node-a-0": 1}))
    assert not problems(D.check(fleet([a, b])), "lookup_leak")
    assert not problems(D.check(fleet([a, b])), "stale_read_locks")


def test_read_locks_left_with_nothing_in_flight_are_a_warning():
    a = inst("node-a-0", lookup_samples=_samples(0, 8))
    [f] = problems(D.check(fleet([a, inst("node-b-0", lookup_samples=_samples(0, 0))])), "stale_read_locks")
    assert f.severity == "warn" and f.cause.id == "stale_read_locks" and "300 s" in f.fix + CAUSES[f.cause.id].means


def test_vllm_flags_that_differ_are_must_agree_findings():
    a = inst("node-a-0", engine_flags={"vllm_block_size": "16", "vllm_model": "/m@main"})
    b = inst("node-b-0", engine_flags={"vllm_block_size": "32", "vllm_model": "/m@main"})
    [f] = problems(D.check(fleet([a, b])), "agree:vllm_block_size")
    assert f.value == "node-a-0=16, node-b-0=32" and "vllm.block_size" in f.fix
