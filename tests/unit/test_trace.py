"""Trace summaries (`parse_ucx_trace.py`, `p2pctl ucx-trace`) over captured UCX and NIXL logs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from p2p_ops.cli import main
from p2p_ops.diagnose.traces import trace_report
from p2p_ops.facts.ucx_trace import normalise_message, parse_trace, parse_traces

REPO = Path(__file__).resolve().parents[2]
FIX = REPO / "tests" / "fixtures" / "diagnose"
SCRIPT = REPO / ".claude" / "skills" / "lmcache-p2p-diagnose" / "scripts" / "parse_ucx_trace.py"


def summary(*names: str):
    return parse_traces([(n, (FIX / n).read_text()) for n in names])


def by_name(s):
    return {ep.name: ep for ep in s.endpoints}


def test_perftest_tcp_is_software_emulation_over_lo():
    s = summary("ucx/perftest_client.log")
    ep = by_name(s)["ep_cfg[0]"]
    assert (ep.payload_class, ep.payload_lanes, ep.emulated) == ("tcp", ["tcp/lo"], True)
    assert len(ep.tables) == 2  # the repeated (multi) table is counted once
    assert s.ucx_versions == ["1.13.1"] and s.ucx_env["UCX_TLS"] == "tcp"
    assert [(g.level, g.count) for g in s.errors] == [("DIAG", 1), ("DIAG", 1)]


def test_perftest_get_over_shared_memory():
    ep = summary("ucx/perftest_get_shm_client.log").endpoints[0]
    assert ep.payload_class == "shm" and ep.payload_lanes == ["sysv/memory"] and not ep.emulated
    assert "ucp_get" in ep.payload_source


def test_ucx_info_endpoint_dump_lanes():
    ep = summary("ucx/ucx_info_e_tcp.txt").endpoints[0]
    assert ep.kinds["rma_bw"] == ["cma/memory"] and ep.kinds["am"] == ["self/memory0"]
    assert ep.transports == ["cma", "self"]


def test_missing_rc_transport_warning_and_old_ep_cfg_line():
    s = summary("ucx/ucx_info_e_rc_missing.txt")
    assert by_name(s)["ep_cfg[0]"].kinds["tag"] == ["self/memory0", "cma/memory"]
    assert s.errors[0].level == "WARN" and "transport 'rc' is not available" in s.errors[0].message


def test_nixl_probe_logs_read_path_per_tls():
    default = by_name(summary("nixl/probe_default_initiator.log"))["initiator intra-node cfg#1"]
    assert (default.payload_class, default.payload_lanes, default.emulated) == ("shm", ["cma/memory"], False)
    assert default.kinds["rma_am"] == ["tcp/lo"]
    tcp = by_name(summary("nixl/probe_tcp_initiator.log"))["initiator intra-node cfg#1"]
    assert (tcp.payload_class, tcp.emulated) == ("tcp", True)


def test_two_processes_merge_with_agents_and_versions():
    s = summary("nixl/probe_default_initiator.log", "nixl/probe_default_target.log")
    assert s.nixl_agents == ["initiator", "target"] and s.ucx_versions == ["1.23.0"]
    assert {ep.name for ep in s.endpoints} >= {"initiator self cfg#0", "target intra-node cfg#1"}
    # The initiator exits first; the target logs the closed connection at DIAG, which is not a fault.
    assert [g.level for g in s.errors] == ["DIAG"] and "Connection reset" in s.errors[0].message


def test_multirail_rdma_and_tcp_fallback_recorded():
    rdma = by_name(summary("ucx/recorded_rdma_multirail.log"))["ucp_context_0 inter-node cfg#1"]
    assert rdma.payload_class == "rdma" and rdma.payload_lanes == ["rc_mlx5/mlx5_0:1", "rc_mlx5/mlx5_1:1"]
    assert rdma.kinds["rma"] == ["rc_mlx5/mlx5_0:1", "rc_mlx5/mlx5_1:1"]
    tcp = by_name(summary("ucx/recorded_tcp_fallback.log"))
    assert tcp["ucp_context_0 inter-node cfg#3"].payload_lanes == ["tcp/bond0"]
    assert tcp["ucp_context_0 intra-node cfg#2"].emulated  # only rma_am: RMA over active messages


def test_errors_group_across_addresses_and_threads():
    s = summary("ucx/recorded_errors.log")
    groups = {g.message: g for g in s.errors}
    flushed = [g for m, g in groups.items() if m.startswith("send completion[0]")]
    assert len(flushed) == 1 and flushed[0].count == 3 and flushed[0].first_seen == "ucx/recorded_errors.log:3"
    assert any(g.level == "FATAL" and "Transport retry count exceeded" in m for m, g in groups.items())
    assert s.lines_read == 9 and s.lines_understood == 8
    assert normalise_message("x on rdmap/0x55cf  wr_id 0xab") == "x on rdmap/0x? wr_id 0x?"


def test_nixl_failures_and_exceptions():
    s = summary("nixl/recorded_tls_without_cuda.log", "nixl/recorded_remote_disconnect.log")
    assert s.nixl_ucx_config == {"ADDRESS_VERSION": "v2", "MAX_RMA_RAILS": "2"}
    assert s.exceptions == ["NIXL_ERR_BACKEND", "NIXL_ERR_REMOTE_DISCONNECT"]
    register = [g for g in s.errors if g.message.startswith("registerMem")]
    assert register[0].count == 2 and register[0].source == "nixl"


def test_trace_report_findings_and_expect_rdma():
    s = summary("ucx/recorded_tcp_fallback.log")
    assert trace_report(s).exit_code == 0
    strict = trace_report(s, expect_rdma=True)
    assert strict.exit_code == 1
    assert [(f.check, f.subject) for f in strict.problems] == [("payload_path", "node-d:2066749 ucp_context_0 "
                                                                                 "inter-node cfg#3")]
    failing = trace_report(parse_trace((FIX / "nixl/probe_tls_rc_initiator.log").read_text()))
    assert failing.exit_code == 1
    assert any(f.cause.id == "tls_unavailable" and "UCX_TLS" in f.fix for f in failing.problems)


def test_cli_json_and_nothing_to_parse(tmp_path, capsys):
    assert main(["ucx-trace", str(FIX / "nixl/probe_tcp_initiator.log"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["facts"]["transports"] == ["tcp"] and data["healthy"]
    empty = tmp_path / "empty.log"
    empty.write_text("nothing here\n")
    assert main(["ucx-trace", str(empty)]) == 2
    assert main(["ucx-trace", str(tmp_path / "missing.log")]) == 2


def test_script_wrapper_runs():
    res = subprocess.run([sys.executable, str(SCRIPT), str(FIX / "ucx/recorded_rdma_multirail.log"),
                          "--expect-rdma"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "payload rdma: rc_mlx5/mlx5_0:1, rc_mlx5/mlx5_1:1" in res.stdout
