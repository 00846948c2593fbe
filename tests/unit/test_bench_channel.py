"""The transfer-channel benchmark wrapper: its parser on captured client runs, its sweep through fake nodes.

tests/fixtures/bench/channel/ holds client outputs of `lmcache tool transfer-channel-benchmark` (LMCache 0.5.6)
rebuilt from the tool's print statements (its README says how to replace them with captured runs).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from p2p_ops.bench import channel
from p2p_ops.errors import BadInput, CouldNotRun
from p2p_ops.facts.logs import log_excerpt_fact, log_grep_fact
from p2p_ops.lifecycle import procs
from tests.support.fake_connector import act, expect, fact, pid_states, start

CAPTURED = Path(__file__).resolve().parents[1] / "fixtures" / "bench" / "channel"
MIB = 1 << 20


def _captured(name: str) -> str:
    return (CAPTURED / name).read_text()


@pytest.mark.parametrize("name,count", [("client_ok_1.txt", 1), ("client_ok_16.txt", 16)])
def test_client_reports_parse_to_figures(name, count):
    run = channel.parse_client_output(_captured(name), verify=True, object_size=MIB, num_objects=count)
    assert run.ok and run.verified and not run.error
    assert run.channel_type == "nixl" and (run.iters, run.warmup) == (5, 1)
    assert run.payload_bytes == count * MIB
    assert run.best_ms <= run.median_ms and run.best_gbps >= run.median_gbps > 0
    t = sorted(run.times_ms)
    assert len(t) == 5 and run.p99_ms == pytest.approx(t[3] + (t[4] - t[3]) * 0.96) and run.p50_ms == t[2]
    # LMCache's median is the same read as our p50 (its ms are rounded to 2 places)
    assert abs(run.p50_ms - run.median_ms) < 0.01
    assert run.connect_s is not None


def test_failed_client_runs_name_the_cause():
    mismatch = channel.parse_client_output(_captured("client_page_mismatch.txt"), True, MIB, 1)
    assert not mismatch.ok and "page_size mismatch" in mismatch.error and mismatch.median_gbps is None
    lost = channel.parse_client_output(_captured("client_no_server.txt"), True, MIB, 1)
    assert not lost.ok and "timed out fetching catalog" in lost.error


def test_a_report_without_verify_ok_is_a_failed_check():
    text = _captured("client_ok_1.txt").replace("verify OK", "verify skipped")
    run = channel.parse_client_output(text, verify=True, object_size=MIB, num_objects=1)
    assert not run.ok and run.verified is False and run.median_gbps  # figures kept, the run did not pass
    assert channel.parse_client_output(text, verify=False, object_size=MIB, num_objects=1).ok


def test_without_per_read_times_p50_is_the_median():
    text = re.sub(r"^\[p2p\] times_ms .*$", "", _captured("client_ok_1.txt"), flags=re.M)
    run = channel.parse_client_output(text, verify=True, object_size=MIB, num_objects=1)
    assert run.ok and run.times_ms is None and run.p50_ms == run.median_ms and run.p99_ms is None


def test_empty_output_is_a_failure_not_a_crash():
    run = channel.parse_client_output("", verify=True, object_size=MIB, num_objects=1)
    assert not run.ok and run.error == "the client printed nothing"


@pytest.mark.parametrize("kw,field", [({"object_size": 3000}, "page size"), ({"counts": ()}, "counts"),
                                      ({"counts": (0,)}, "counts"), ({"iters": 0}, "iters")])
def test_bad_options_name_the_value(kw, field):
    opts = channel.Options(**{"object_size": MIB, "counts": (1,), **kw})
    with pytest.raises(BadInput, match=field):
        opts.check()


def test_transport_env_carries_only_what_the_fleet_sets():
    assert channel.transport_env() == {"LMCACHE_TRACK_USAGE": "false"}
    assert channel.transport_env("rc,sm,self", "mlx5_0:1") == {
        "LMCACHE_TRACK_USAGE": "false", "UCX_TLS": "rc,sm,self", "UCX_NET_DEVICES": "mlx5_0:1"}


def _sides(fakes, tmp_path):
    a = fakes.connector("node-a")
    b = fakes.connector("node-b")
    env = channel.transport_env("tcp", "veth-a")
    server = channel.Side(a, "198.18.0.2", python="/opt/p2p/.venv/bin/python", workdir="/run/a", env=env)
    client = channel.Side(b, "198.18.0.3", python="/opt/p2p/.venv/bin/python", workdir="/run/b",
                          env=channel.transport_env("tcp", "veth-b"))
    return server, client


def test_sweep_one_server_one_client_per_count(fakes, tmp_path):
    server, client = _sides(fakes, tmp_path)
    opts = channel.Options(object_size=MIB, counts=(1, 16), page_size=65536)
    ports = channel.Ports(17600, 17610, 17601)
    proc = channel.server_proc(server, ports)
    server.conn.expect(expect("mkdir -p /run/a"), start(proc),
                       fact(log_grep_fact(proc.log, [re.escape(channel.READY_LINE)], 1), "[server] ready: ..."),
                       act(lambda c: procs.stop(c, proc, grace_s=10), "stopped\n"))
    for n in opts.counts:
        client.conn.expect(expect(channel.client_command(server, client, opts, ports, n),
                                  _captured(f"client_ok_{n}.txt")))
    runs = channel.run_channel(server, client, opts, ports)
    assert [r.num_objects for r in runs] == [1, 16] and all(r.ok for r in runs)
    wrapper = server.conn.puts[0]
    assert wrapper.remote == proc.wrapper and wrapper.mode == 0o700
    text = wrapper.data.decode()
    assert "export UCX_NET_DEVICES=veth-a" in text and "--url 198.18.0.2:17600 " in text
    assert "--num-source-objects 16 " in text and "--page-size 65536" in text
    sent = client.conn.commands[0]
    assert "export UCX_NET_DEVICES=veth-b" in sent and "--listen-url 198.18.0.3:17601" in sent
    assert "--verify" in sent and "--url 198.18.0.2:17600" in sent
    assert "--transfer-channel-type nixl" in text and "--transfer-channel-type nixl" in sent


def test_the_channel_type_reaches_both_roles():
    server, client = (channel.Side(None, a) for a in ("127.0.0.1", "127.0.0.2"))
    opts = channel.Options(MIB, (1,), channel_type="mooncake_te")
    ports = channel.Ports(1, 2, 3)
    for args in (channel.server_args(server, opts, ports), channel.client_args(server, client, opts, ports, 1)):
        assert args[args.index("--transfer-channel-type") + 1] == "mooncake_te"


def test_a_server_that_dies_is_reported_with_its_log_and_stopped(fakes, tmp_path):
    server, client = _sides(fakes, tmp_path)
    ports = channel.Ports(17600, 17610, 17601)
    proc = channel.server_proc(server, ports)
    server.conn.expect(expect("mkdir -p /run/a"), start(proc),
                       fact(log_grep_fact(proc.log, [re.escape(channel.READY_LINE)], 1), ""),
                       pid_states([proc], {proc.name: "dead 4242"}),
                       fact(log_excerpt_fact(proc.log), "RuntimeError: source pool does not fit"),
                       act(lambda c: procs.stop(c, proc, grace_s=5), "dead\n"))
    with pytest.raises(CouldNotRun, match=r"(?s)did not get ready.*source pool does not fit"):
        channel.run_channel(server, client, channel.Options(MIB, (1,)), ports)


def test_a_crash_after_the_report_fails_the_run(fakes, tmp_path):
    server, client = _sides(fakes, tmp_path)
    opts = channel.Options(MIB, (1,))
    ports = channel.Ports(17600, 17610, 17601)
    from p2p_ops.connectors.base import Result
    client.conn.expect(expect(channel.client_command(server, client, opts, ports, 1),
                              Result("", "", 139, _captured("client_ok_1.txt"))))
    run = channel.run_client(server, client, opts, ports, 1)
    assert not run.ok and "exited 139" in run.error and run.median_gbps


# ---- bench transfer's verdict and table (pure) ---------------------------------------------------------------

def _row(n, p50, ok=True):
    run = channel.ChannelRun(MIB, n, ok=ok, median_gbps=1.0, p50_ms=p50, p99_ms=p50, verified=ok,
                             error="" if ok else "RuntimeError: verify FAILED for source object 3")
    return {**run.to_dict(), "memcpy_gbps": 5.0}


def test_transfer_verdict_judges_the_whole_prefix():
    from p2p_ops.bench.transfer import verdict

    assert verdict([_row(1, 1.0), _row(16, 40.0)], 100)[0]
    ok, line = verdict([_row(1, 1.0), _row(16, 140.0)], 100)
    assert not ok and line.startswith("SLOW") and "16.0 MiB" in line
    ok, line = verdict([_row(1, 1.0, ok=False), _row(16, 4.0)], 100)
    assert not ok and "verify FAILED" in line
    assert not verdict([], 100)[0]


def test_transfer_table_has_a_row_per_size_and_memcpy_beside_it():
    from p2p_ops.cli.bench_cmds import transfer_table

    lines = transfer_table({"rows": [_row(1, 1.0), _row(16, 4.0, ok=False)]}).splitlines()
    assert "memcpy GB/s" in lines[0] and len(lines) == 3
    assert lines[1].split()[:2] == ["1.00", "1"] and "5.00" in lines[1] and lines[2].split()[-1] != "yes"


def test_two_engines_share_one_table_a_line_per_size_side_by_side_with_memcpy():
    from p2p_ops.cli.bench_cmds import transfer_table

    rows = [{**_row(n, p50), "engine": e} for e, p50 in (("nixl", 2.0), ("mooncake_te", 3.0)) for n in (1, 16)]
    rows[-1] = {**_row(16, 3.0, ok=False), "engine": "mooncake_te"}
    lines = transfer_table({"rows": rows, "engines": ["nixl", "mooncake_te"]}).splitlines()
    assert len(lines) == 3 and "nixl GB/s" in lines[0] and "mooncake_te GB/s" in lines[0]
    assert lines[1].split() == ["1.00", "1", "1.00", "2.00", "1.00", "3.00", "5.00"]
    assert lines[2].split()[:4] == ["16.00", "16", "1.00", "2.00"] and "FAIL" in lines[2]


def _sweeps(*p50s_per_repeat, failed=()):
    """Rows as repeated sweeps run them, sizes interleaved: repeat r reads size n in p50s_per_repeat[r][n] ms."""
    rows = []
    for r, p50s in enumerate(p50s_per_repeat):
        for n, p50 in p50s.items():
            row = _row(n, p50, ok=(r, n) not in failed)
            rows.append({**row, "median_gbps": round(n * MIB / p50 / 1e6, 3)})
    return rows


def test_repeated_sweeps_become_one_row_per_size_median_with_min_max_keeping_every_repeat():
    from p2p_ops.bench.transfer import per_size

    one, sixteen = per_size(_sweeps({1: 1.0, 16: 40.0}, {1: 2.0, 16: 60.0}, {1: 1.5, 16: 50.0}, failed={(1, 1)}))
    assert (one["p50_ms"], one["p50_range"], one["ok"], len(one["runs"])) == (1.25, [1.0, 1.5], False, 3)
    assert "verify FAILED" in one["error"] and [r["p50_ms"] for r in one["runs"]] == [1.0, 2.0, 1.5]
    assert sixteen["ok"] and sixteen["p50_ms"] == 50.0 and sixteen["p50_range"] == [40.0, 60.0]
    assert sixteen["median_gbps"] == round(16 * MIB / 50.0 / 1e6, 3)
    assert sixteen["gbps_range"] == [round(16 * MIB / 60.0 / 1e6, 3), round(16 * MIB / 40.0 / 1e6, 3)]


def test_a_need_inside_the_repeats_range_is_inconclusive_and_one_outside_is_decided():
    from p2p_ops.bench.transfer import per_size, verdict
    from p2p_ops.cli.bench_cmds import transfer_table

    rows = per_size(_sweeps({1: 1.0, 16: 40.0}, {1: 1.0, 16: 60.0}, {1: 1.0, 16: 50.0}))
    ok, line = verdict(rows, 55)
    assert ok and line.startswith("OK: the prefix (16.0 MiB) reads in 50.0 (40.0-60.0) ms (p50), within 55 ms")
    assert "inconclusive on this box: its 3 sweeps read it in 40.0-60.0 ms, on both sides of 55 ms" in line
    ok, line = verdict(rows, 45)
    assert not ok and line.startswith("SLOW") and "inconclusive on this box" in line
    ok, line = verdict(rows, 100)
    assert ok and "inconclusive" not in line
    table = transfer_table({"rows": rows}).splitlines()
    assert "GB/s median (min-max)" in table[0] and "50.00 (40.00-60.00)" in table[2]
    assert f"{16 * MIB / 50e6:.2f} ({16 * MIB / 60e6:.2f}-{16 * MIB / 40e6:.2f})" in table[2]


@pytest.mark.parametrize("count", [1, 16])
def test_captured_runs_parse_the_same(count):
    # Real runs (127.0.0.1, UCX_NET_DEVICES=lo, a busy 2-core box); the client segfaulted after its report
    # (exit 139, in NIXL/UCX teardown), which run_client turns into a failed run.
    run = channel.parse_client_output(_captured(f"captured/client_ok_{count}.txt"), True, MIB, count)
    t = sorted(run.times_ms)
    assert run.ok and run.verified and len(t) == 5 and t[3] < run.p99_ms <= t[4]
    assert abs(run.p50_ms - run.median_ms) < 0.01 and run.median_gbps > 0
    assert "page_size mismatch" in channel.parse_client_output(
        _captured("captured/client_page_mismatch.txt"), True, MIB, 1).error
    assert "timed out fetching catalog" in channel.parse_client_output(
        _captured("captured/client_no_server.txt"), True, MIB, 1).error


def test_a_crash_at_exit_after_main_returned_counts_the_figures_with_a_note(fakes, tmp_path):
    # A real run (127.0.0.1, lo): LMCache 0.5.6's client printed its verified report, main() returned 0, then
    # the interpreter segfaulted on the way out (exit 139).
    server, client = _sides(fakes, tmp_path)
    opts = channel.Options(MIB, (1,))
    ports = channel.Ports(17600, 17610, 17601)
    from p2p_ops.connectors.base import Result
    text = _captured("captured/client_139_after_main.txt")
    client.conn.expect(expect(channel.client_command(server, client, opts, ports, 1), Result("", "", 139, text)))
    run = channel.run_client(server, client, opts, ports, 1)
    assert run.ok and run.main_rc == 0 and run.median_gbps > 0 and not run.error
    assert "exited 139" in run.note and "main() returned 0" in run.note


def test_judge_exit_fails_a_crash_before_main_returned_and_keeps_a_failed_run_failed():
    run = channel.parse_client_output(_captured("client_ok_1.txt") + "\n[p2p] main returned 1\n", True, MIB, 1)
    assert not channel.judge_exit(run, 1).ok
    failed = channel.parse_client_output(_captured("client_page_mismatch.txt"), True, MIB, 1)
    assert not channel.judge_exit(failed, 0).ok and not failed.note
    clean = channel.parse_client_output(_captured("client_ok_1.txt"), True, MIB, 1)
    assert channel.judge_exit(clean, 0).ok and not clean.note


def test_the_need_is_recomputing_the_prefix():
    from p2p_ops.spec.load import parse_fleet as load_fleet_data
    from p2p_ops.spec.starter import local_fleet
    from p2p_ops.spec.transfer_sizes import fleet_size_plan, need_ms

    data = local_fleet(2)
    fleet = load_fleet_data(data)
    plan = fleet_size_plan(fleet, 8192)
    ms, why = need_ms(fleet, plan)
    from p2p_runtime.timing_profiles import DEFAULT, TIMING_PROFILES

    assert ms == round(8192 * TIMING_PROFILES[DEFAULT].prefill_us_per_token / 1e3, 1) and DEFAULT in why
    data["engine"]["prefill_us_per_token"] = 600.0
    ms, why = need_ms(load_fleet_data(data), plan)
    assert ms == round(8192 * 600 / 1e3, 1) and "prefill_us_per_token" in why
