"""The router failover figures, from samples of the router's own per-worker metrics."""

from __future__ import annotations

from p2p_ops.observe.records import RequestRecord
from p2p_ops.harness.faults.scenarios import SCENARIOS, client_saw, failover_figures, worker_value
from p2p_ops.spec.settings import RouterSettings

W = "http://127.0.0.1:8002"


def test_figures_say_when_the_router_stopped_and_started_sending_again():
    # (t, sent to the worker so far, healthy, breaker): killed at t=10, breaker opens at 10.5 after one more
    # request went there, health check fails at 12; restarted at 14, first request back at 16.
    rows = [(9.0, 40, 1, 0), (10.0, 41, 1, 0), (10.5, 42, 1, 1), (12.0, 42, 0, 1), (14.0, 42, 0, 1),
            (15.0, 42, 1, 2), (16.0, 44, 1, 0)]
    fig = failover_figures(rows, fault_t=10.0, restart_t=14.0)
    assert fig == {"stopped_sending_after_s": 0.5, "sent_while_dead": 1, "marked_down_after_s": 0.5,
                   "sent_again_after_restart_s": 2.0}


def test_a_worker_the_router_never_dropped_nor_took_back():
    rows = [(9.0, 40, 1, 0), (11.0, 45, 1, 0), (13.0, 50, 1, 0), (16.0, 55, 1, 0)]
    fig = failover_figures(rows, fault_t=10.0, restart_t=14.0)
    assert fig["marked_down_after_s"] is None and fig["sent_while_dead"] == 10 and fig["stopped_sending_after_s"] == 3
    assert failover_figures(rows[:1], 10.0, None)["sent_again_after_restart_s"] is None


def test_worker_values_match_whatever_the_label_is_called():
    samples = [("vllm_router_processed_requests_total", {"worker": W + "/"}, 3.0),
               ("vllm_router_processed_requests_total", {"worker": "http://127.0.0.1:8001"}, 9.0),
               ("vllm_router_cb_state", {"worker_url": W}, 1.0)]
    assert worker_value(samples, "vllm_router_processed_requests_total", W) == 3.0
    assert worker_value(samples, "vllm_router_cb_state", W) == 1.0
    assert worker_value(samples, "vllm_router_worker_health", W) is None


def test_client_errors_are_grouped_by_kind():
    def sample(t, ok, error=""):
        return RequestRecord("", 0, "", "", "", "", t, 0, 0, 0, 0.1 if ok else None, 0.1, ok, error, url="u")

    s = [sample(0, False, "ConnectionError: refused by peer now"), sample(1, False, "ConnectionError: refused by peer now"),
         sample(2, True), sample(3, False, '{"error": "No healthy workers"}')]
    assert client_saw(s) == {"ConnectionError: refused by peer": 2, '{"error": "No healthy workers"}': 1}


def test_router_scenarios_are_listed_and_the_failover_flags_rendered():
    assert SCENARIOS["engine_killed_via_router"].via_router and SCENARIOS["peer_server_killed_via_router"].via_router
    args = RouterSettings(enabled=True).failover_args()
    pairs = dict(zip(args[::2], args[1::2]))
    assert pairs["--cb-failure-threshold"] == "1" and pairs["--health-check-interval-secs"] == "2"
    assert pairs["--retry-max-retries"] == "4" and len(pairs) == 9
