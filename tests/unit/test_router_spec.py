"""The router section of the fleet spec, its rendering, and the pure parts of the router benchmarks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from p2p_ops.bench import calibrate, placement_verdict
from p2p_ops.errors import BadInput
from p2p_ops.harness.crossover import CrossoverRow
from p2p_ops.lifecycle.render import render_fleet
from p2p_ops.observe.records import RequestRecord
from p2p_ops.spec.layout import RunLayout
from p2p_ops.spec.load import parse_fleet
from p2p_ops.spec.starter import local_fleet


def router_fleet(runtime: str = "embedded", **router) -> dict:
    data = local_fleet(2, name="r", runtime=runtime,
                       vllm={"model_path": "/models/tiny"} if runtime == "vllm" else None)
    data["router"] = {"enabled": True, "policy": "kv_aware", "port": 8200, "prometheus_port": 8201,
                      "kv_events_port_base": 5557, **router}
    return data


def rendered(data: dict) -> dict[str, str]:
    layout = RunLayout(Path("/srv/run/r"))
    return {f"{f.unit}/{f.name}": f.text for f in render_fleet(parse_fleet(data), lambda n: layout)}


def test_router_is_off_by_default_and_renders_nothing():
    files = rendered(local_fleet(2, name="r"))
    assert not any(k.startswith("router/") for k in files)
    assert "export P2P_KV_EVENTS_CONFIG=''" in files["node-a-0/env.sh"]


def test_router_renders_workers_policy_and_kv_event_sources():
    files = rendered(router_fleet(cache_threshold=0.5, args=["--request-timeout-secs", "60"]))
    env = files["router/env.sh"]
    assert "export P2P_ROUTER_POLICY=kv_aware" in env and "export P2P_ROUTER_HOST=127.0.0.1" in env
    wrapper = files["router/start_router.sh"]
    assert "--worker-urls http://127.0.0.1:8001 http://127.0.0.1:8002 \\\n" in wrapper
    for word in ("--cache-threshold 0.5", "--kv-event-source http://127.0.0.1:8001=tcp://127.0.0.1:5557",
                 "--kv-event-replay-source http://127.0.0.1:8002=tcp://127.0.0.1:5560",
                 "--kv-event-block-size 16", "--kv-event-model tiny-llm", "--request-timeout-secs 60",
                 '--prometheus-host "$P2P_ROUTER_HOST"'):
        assert word in wrapper
    cfg = json.loads(files["node-b-0/env.sh"].split("export P2P_KV_EVENTS_CONFIG='")[1].split("'")[0])
    assert cfg == {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": "tcp://127.0.0.1:5559",
                   "replay_endpoint": "tcp://127.0.0.1:5560", "topic": ""}
    assert '--kv-events-config "$P2P_KV_EVENTS_CONFIG"' in files["node-b-0/start_engine.sh"]


def test_vllm_gets_an_endpoint_it_binds_on_one_address():
    files = rendered(router_fleet("vllm"))
    cfg = json.loads(files["node-a-0/env.sh"].split("export P2P_KV_EVENTS_CONFIG='")[1].split("'")[0])
    # vLLM binds only endpoints containing '*' or '::'; the IPv4-mapped form binds 127.0.0.1 alone.
    assert cfg["endpoint"] == "tcp://[::ffff:127.0.0.1]:5557"
    assert "--kv-event-block-size 128" in files["router/start_router.sh"]
    assert "--kv-events-config" in files["node-a-0/start_engine.sh"]


def test_p2p_off_keeps_servers_out_of_the_mesh():
    data = local_fleet(2, name="r")
    data["settings"]["p2p"] = False
    files = rendered(data)
    assert "export LMCACHE_P2P_ENABLED=0" in files["node-a-0/env.sh"]
    assert "--p2p-advertise-url" not in files["node-a-0/start_server.sh"]
    assert "--p2p-advertise-url" in rendered(local_fleet(2, name="r"))["node-a-0/start_server.sh"]


@pytest.mark.parametrize("router, words", [
    ({"port": 8001}, ["router.port", "8001", "node-a-0"]),
    ({"prometheus_port": 9300}, ["router.prometheus_port", "coordinator"]),
    ({"kv_events_port_base": 8080}, ["router.kv_events_port_base", "8081"]),
    ({"policy": "fastest"}, ["router.policy"]),
    ({"node": "node-z"}, ["router.node", "node-z"]),
    ({"cache_threshold": 2}, ["router.cache_threshold"]),
    ({"cb_failure_threshold": 0}, ["router.cb_failure_threshold"]),
    ({"retry_initial_backoff_ms": 500, "retry_max_backoff_ms": 100}, ["retry_max_backoff_ms", "500"]),
])
def test_bad_router_settings_name_the_field(router, words):
    with pytest.raises(BadInput) as err:
        parse_fleet(router_fleet(**router))
    assert all(w in str(err.value) for w in words), str(err.value)
    assert "\n" not in str(err.value)


def turn(q: int, ttft: float, cached: int, prompt: int = 1000, ok: bool = True) -> RequestRecord:
    return RequestRecord("arm", q, "", "", "", "s0", 0.0, prompt, cached, 1, ttft if ok else None, ttft, ok)


def test_placement_summary_splits_tokens_and_margins():
    turns = [turn(0, 1.0, 0), turn(1, 0.2, 768), turn(2, 0.2, 768), turn(3, 9.0, 0, ok=False)]
    on = placement_verdict.summarize("round_robin", True, turns, 2.0, peer_tokens=512, kv_hits=3)
    assert (on.turns, on.failed, on.req_per_s) == (4, 1, 1.5)
    assert (on.local_tokens, on.peer_tokens, on.recomputed_tokens) == (1024, 512, 1464)
    assert on.ttft_p50_ms == pytest.approx(200)
    off = placement_verdict.summarize("round_robin", False, turns[:1] + [turn(1, 1.0, 0)], 4.0, peer_tokens=0)
    m = placement_verdict.margins([on, off])
    assert m["round_robin"]["throughput_x"] == pytest.approx(1.5 / 0.5)
    md = placement_verdict.markdown([on, off], placement_verdict.PlacementOptions.quick())
    assert "| round_robin | yes | 1 | 1.50 |" in md and "3.00x" in md


def test_placement_options_refuse_bad_input():
    with pytest.raises(BadInput, match="--policies"):
        placement_verdict.PlacementOptions(policies=["nope"]).validate()
    with pytest.raises(BadInput, match="--nodes"):
        placement_verdict.PlacementOptions(nodes=1).validate()
    with pytest.raises(BadInput, match="--repeats 0: give 1 or more"):
        placement_verdict.PlacementOptions(repeats=0).validate()


def row(tokens: int, pulled: float, recompute: float, cached: int = 1) -> CrossoverRow:
    return CrossoverRow(tokens, recompute, pulled, recompute, cached)


def test_calibration_advice_is_the_length_from_which_pulls_always_win():
    rows = [row(256, 0.05, 0.04), row(512, 0.05, 0.06), row(1024, 0.08, 0.07), row(2048, 0.09, 0.2),
            row(4096, 0.1, 0.4)]
    assert calibrate.advice(rows, 4096) == {"min_pull_tokens": 2048, "doc_tokens": 4096, "cache_threshold": 0.5}
    assert calibrate.advice(rows[:3], 4096)["min_pull_tokens"] is None
    assert calibrate.advice([row(256, 0.01, 0.02, cached=0)], 1000)["min_pull_tokens"] is None


def test_only_kv_aware_gets_event_sources():
    env = rendered(router_fleet(policy="cache_aware"))["router/env.sh"]
    assert "--kv-event-source" not in env and "P2P_ROUTER_POLICY=cache_aware" in env


@pytest.mark.parametrize("argv, words", [
    (["bench", "placement", "--policies", "round_robin,nope"], ["--policies", "nope"]),
    (["bench", "placement", "--nodes", "1"], ["--nodes"]),
    (["bench", "placement", "--questions", "1"], ["--questions"]),
    (["calibrate", "--lengths", "512,abc"], ["--lengths"]),
])
def test_bench_verbs_refuse_bad_input_in_one_line(p2pctl, argv, words):
    code, out, err = p2pctl(*argv)
    assert code == 2
    assert all(w in err for w in words) and len(err.strip().splitlines()) == 1, err


def test_relative_router_venv_is_refused():
    from p2p_ops.errors import BadInput

    data = local_fleet(2, name="r")
    data["router"] = {"enabled": True, "venv": ".venv-router"}
    with pytest.raises(BadInput, match="router.venv: '.venv-router' is relative"):
        parse_fleet(data)
