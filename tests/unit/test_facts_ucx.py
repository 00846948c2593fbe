"""UCX parsers: `ucx_info -v/-d`, log lines, endpoint configs and PROTO_INFO tables (1.13, 1.15+, 1.23)."""

from __future__ import annotations

from pathlib import Path

import pytest

from p2p_ops.facts.ucx_info import parse_ucx_devices, parse_ucx_version
from p2p_ops.facts.ucx_log import parse_ep_config, parse_lanes, parse_log_line, parse_proto_tables, split_lane

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "diagnose"


def read(*parts: str) -> str:
    return FIX.joinpath(*parts).read_text()


def tables(text: str):
    streams = {}
    for raw in text.splitlines():
        line = parse_log_line(raw)
        if line and line.kind == "row":
            streams.setdefault(line.stream, []).append(line.message)
    return [t for stream, rows in streams.items() for t in parse_proto_tables(rows, *stream)]


def test_ucx_info_version_debian_build():
    v = parse_ucx_version(read("ucx", "ucx_info_v.txt"))
    assert v.version == "1.13.1" and {"--disable-logging", "--with-verbs"} <= set(v.configured_with)
    assert not any(flag.startswith("--with-cuda") for flag in v.configured_with)


def test_ucx_info_version_newer_format():
    text = "# Library version: 1.16.0\n# Library path: /opt/hpcx/ucx/lib/libucs.so.0\n# API headers version: 1.16.0\n" \
           "# Configured with: --disable-logging --with-cuda=/usr/local/cuda --with-gdrcopy\n"
    v = parse_ucx_version(text)
    assert v.version == "1.16.0" and v.configured_with == ["--disable-logging", "--with-cuda=/usr/local/cuda",
                                                        "--with-gdrcopy"]
    assert parse_ucx_version("bash: ucx_info: command not found").error


def test_ucx_info_devices_without_rdma():
    d = parse_ucx_devices(read("ucx", "ucx_info_d_noib.txt"))
    assert [md.name for md in d.memory_domains] == ["self", "tcp", "sysv", "posix", "cma"]
    assert [t.label for t in d.transports if t.transport == "tcp"] == ["tcp/lo", "tcp/eth0"]
    assert d.connection_managers == ["tcp"] and d.failed == ["connection manager rdmacm"]
    assert {t.transport for t in d.transports} == {"tcp", "self", "sysv", "posix", "cma"} and not d.has_dmabuf()
    tcp = d.memory_domains[1].transports[0]
    assert (tcp.type, tcp.sysdev) == ("network", "<unknown>")


def test_ucx_info_devices_rdma_and_dmabuf_from_a_tree():
    d = parse_ucx_devices(read("rdma", "ib_healthy", "tools", "ucx_info_d.txt"))
    rc = [t for t in d.transports if t.transport == "rc_mlx5"]
    assert len(rc) == 8 and rc[0].device == "mlx5_0:1" and rc[0].sysdev == "mlx5_0 (0)"
    assert d.has_dmabuf()
    assert not parse_ucx_devices(read("rdma", "no_peermem", "tools", "ucx_info_d.txt")).has_dmabuf()


@pytest.mark.parametrize("line,kind,level,host,pid", [
    ("[1796001783.356933] [vm:6378 :0]     ucp_context.c:1849 UCX  INFO  Version 1.13.1 (loaded from x)",
     "log", "INFO", "vm", 6378),
    ("[1784621081.896649] [pod-x:537  :a]       srd_iface.c:221  UCX  ERROR send completion[0] with error",
     "log", "ERROR", "pod-x", 537),
    ("[1796001783.359576] [vm:6378 :0]   |                   0..inf | software emulation | tcp/lo |",
     "row", "", "vm", 6378),
    ("[cn-1:3639441:0:3639441] ib_mlx5_log.c:171  Transport retry count exceeded on mlx5_0:1/IB (synd 0x15)",
     "fatal", "FATAL", "cn-1", 3639441),
    ("# | 0x559b6c5dfe40 ep_cfg[0] | tagged message by ucp_tag_send*() from host memory |", "row", "", "", 0),
])
def test_log_line_kinds(line, kind, level, host, pid):
    parsed = parse_log_line(line)
    assert (parsed.kind, parsed.level, parsed.host, parsed.pid) == (kind, level, host, pid)


def test_non_ucx_lines_are_skipped():
    assert parse_log_line("an unrelated application line") is None
    assert parse_log_line("2026-11-30 01:21:46 NIXL INFO    _api.py:281 Initialized NIXL agent: A") is None


def test_ep_config_new_old_and_nixl_forms():
    ep = parse_ep_config("ucp_context_2 inter-node cfg#3 rma(rc_mlx5/mlx5_ib2:1)  amo(rc_mlx5/mlx5_ib2:1)  "
                         "am(rc_mlx5/mlx5_ib2:1 rc_mlx5/mlx5_ib7:1)")
    assert (ep.context, ep.locality, ep.cfg, ep.name) == ("ucp_context_2", "inter-node", "cfg#3",
                                                          "ucp_context_2 inter-node cfg#3")
    assert ep.kinds["rma"] == ["rc_mlx5/mlx5_ib2:1"] and "rma_am" not in ep.kinds
    old = parse_ep_config("ep_cfg[2]: tag(self/memory0 knem/memory cuda_copy/cuda rc_mlx5/mlx5_0:1)")
    assert old.name == "ep_cfg[2]" and old.kinds["tag"][-1] == "rc_mlx5/mlx5_0:1"
    nixl = parse_ep_config("  B intra-node cfg#1 rma_am(tcp/lo)  amo_am(tcp/lo)  am(tcp/lo cma/memory)  ka(tcp/lo)")
    assert "rma" not in nixl.kinds and nixl.kinds["rma_am"] == ["tcp/lo"]
    assert nixl.kinds["am"] == ["tcp/lo", "cma/memory"]
    assert parse_ep_config("Version 1.23.0 (loaded from x)") is None


def test_lane_cells():
    assert split_lane("rc_mlx5/mlx5_0:1/path0") == ("rc_mlx5", "mlx5_0:1")
    assert parse_lanes("50% on rc_mlx5/mlx5_0:1/path0 and 50% on rc_mlx5/mlx5_1:1/path0") == (
        ["rc_mlx5/mlx5_0:1", "rc_mlx5/mlx5_1:1"], [50, 50])
    assert parse_lanes("tcp/lo") == (["tcp/lo"], [])


def test_proto_tables_ucx_1_13_perftest_put():
    ts = tables(read("ucx", "perftest_client.log"))
    assert [t.operation for t in ts] == [
        "remote memory write by ucp_put*() from host memory to host",
        "remote memory write by ucp_put*(multi) from host memory to host",
        "remote memory write by ucp_put*(multi) from host memory to host"]  # printed twice; trace dedupes
    row = ts[0].rows[0]
    assert (ts[0].endpoint_id, row.range, row.protocol, row.lanes, row.emulated) == (
        "ep_cfg[0]", "0..inf", "software emulation", ["tcp/lo"], True)


def test_proto_tables_ucx_1_13_estimated_rendezvous():
    t = tables(read("ucx", "ucx_info_e_tcp.txt"))[0]
    assert [(r.range, r.protocol, r.lanes, r.estimated) for r in t.rows] == [
        ("0..5562", "eager short", ["self/memory0"], False),
        ("5563..inf", "rendezvous zero-copy read from remote", ["cma/memory"], True)]


def test_proto_tables_new_format_multirail():
    ts = tables(read("ucx", "recorded_rdma_multirail.log"))
    read_table = ts[0]
    assert read_table.endpoint == "ucp_context_0 inter-node cfg#1"
    assert read_table.rows[-1].lanes == ["rc_mlx5/mlx5_0:1", "rc_mlx5/mlx5_1:1"]
    assert read_table.rows[-1].shares == [50, 50] and read_table.rows[-1].estimated
    rocm = ts[1]
    assert rocm.endpoint == "perftest inter-node cfg#2" and rocm.rows[1].emulated and not rocm.rows[2].emulated


def test_proto_tables_ucx_1_23_split_header_inside_nixl():
    ts = tables(read("nixl", "probe_tcp_initiator.log"))
    get = [t for t in ts if "ucp_get" in t.operation]
    assert len(get) == 1 and get[0].endpoint == "initiator intra-node cfg#1"
    assert [(r.range, r.protocol, r.lanes) for r in get[0].rows] == [("0..inf", "software emulation", ["tcp/lo"])]
    first = ts[0]
    assert first.endpoint == "initiator self cfg#0" and first.operation.startswith("remote memory write")
