"""A real Prometheus against a running fleet, read back through prometheus-api-client, and the monitor."""

from __future__ import annotations

import json
import shutil
import time

import pytest
from prometheus_api_client import PrometheusConnect

from p2p_ops import prom
from p2p_ops.harness.basic import run_basic

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(not shutil.which("prometheus"), reason="prometheus not installed (.ci/run installs it)")]


def test_prometheus_scrapes_servers_and_engines_and_monitor_shows_p2p_loads(fleet2, p2pctl, tmp_path):
    assert run_basic(fleet2).passed
    url = prom.up(fleet2)
    try:
        pc = PrometheusConnect(url=url, disable_ssl=True)
        deadline = time.monotonic() + 60
        servers = engines = []
        while time.monotonic() < deadline:
            servers = pc.custom_query('lmcache_mp_l1_usage_ratio')
            engines = pc.custom_query('vllm:num_requests_running')
            loads = pc.custom_query('lmcache_mp_l2_load_completed_requests_total{l2_name="p2p"}')
            if len(servers) == 2 and len(engines) == 2 and loads:
                break
            time.sleep(1)
        assert {s["metric"]["fleet_instance"] for s in servers} == {"node-a-0", "node-b-0"}
        assert {s["metric"]["fleet_instance"] for s in engines} == {"node-a-0", "node-b-0"}
        assert any(float(x["value"][1]) > 0 for x in loads)
        code, out, _ = p2pctl("monitor", "-f", str(fleet2.fleet_file), "--once", "--json")
        frame = json.loads(out)
        assert code == 0 and frame["source"].startswith("prometheus")
        by = {f["instance"]: f for f in frame["frames"]}
        assert by["node-b-0"]["p2p_loads_total"] > 0
    finally:
        assert prom.down(fleet2) == "stopped"
    code, out, _ = p2pctl("monitor", "-f", str(fleet2.fleet_file), "--once", "--json", "--source", "direct")
    frame = json.loads(out)
    assert frame["source"] == "direct /metrics"
    assert {f["instance"]: f for f in frame["frames"]}["node-b-0"]["p2p_loads_total"] > 0
