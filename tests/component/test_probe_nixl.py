"""The NIXL probe for real: two NIXL agent processes on loopback doing a verified READ (a few seconds each).

UCX_NET_DEVICES=lo keeps every socket on loopback; metadata travels through files, so no NIXL listener binds.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from p2p_ops.diagnose.nixl.probe import ProbeOptions, run_probe

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / ".claude" / "skills" / "lmcache-p2p-diagnose" / "scripts" / "probe_nixl.py"

pytestmark = [
    pytest.mark.component,
    pytest.mark.skipif(importlib.util.find_spec("nixl") is None, reason="nixl is not installed"),
]


def test_probe_script_reads_over_tcp_and_reports_the_transport(tmp_path):
    res = subprocess.run(
        [sys.executable, str(SCRIPT), "--tls", "tcp", "--net-devices", "lo", "--size", "4M", "--iterations", "2",
         "--timeout", "60", "--keep-logs", str(tmp_path / "logs"), "--json"],
        capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    result = json.loads(res.stdout)
    assert result["ok"] and result["failure"] is None
    assert result["bytes_checked"] == 2 * (4 << 20) and len(result["seconds"]) == 2
    assert result["throughput_gbps"] > 0 and result["backend"] == "UCX"
    assert result["transports"] == ["tcp"]
    assert result["read_path"]["lanes"] == ["tcp/lo"] and result["read_path"]["emulated"]
    assert result["env"]["UCX_TLS"] == "tcp" and result["env"]["UCX_LOG_LEVEL"] == "info"
    assert (tmp_path / "logs" / "initiator.log").is_file()


def test_probe_default_transports_use_shared_memory_for_the_read():
    result = run_probe(ProbeOptions(env={"UCX_NET_DEVICES": "lo"}, size_bytes=4 << 20, iterations=2,
                                    timeout_s=60))
    assert result.ok, result.failure
    assert result.bytes_checked == 2 * (4 << 20) and result.ucx_version
    assert "cma" in result.transports and result.read_path["class"] == "shm"


def test_probe_maps_an_unusable_ucx_tls_to_cause_and_fix():
    result = run_probe(ProbeOptions(env={"UCX_NET_DEVICES": "lo", "UCX_TLS": "rc"}, size_bytes=1 << 20,
                                    iterations=1, timeout_s=30))
    assert not result.ok and result.bytes_checked == 0
    failure = result.failure
    assert failure.exc_class == "nixlBackendError" and failure.stage == "create_agent"
    assert failure.cause.id == "tls_unavailable" and "'rc'" in failure.cause.evidence[0].seen
    assert "UCX_TLS" in failure.cause.fix
