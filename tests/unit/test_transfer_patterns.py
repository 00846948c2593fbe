"""many-to-one and one-to-many on LMCache's channel: the links each pattern makes, a concurrent round through
fake nodes (one server per source, every client with the round's common start), and the round's aggregate."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from p2p_ops.bench import channel, transfer_patterns
from p2p_ops.connectors.base import Result
from p2p_ops.errors import BadInput
from p2p_ops.facts.logs import log_grep_fact
from p2p_ops.lifecycle import procs
from tests.support.fake_connector import act, expect, fact, start

CAPTURED = Path(__file__).resolve().parents[1] / "fixtures" / "bench" / "channel"
MIB = 1 << 20


def _ports():
    counter = iter(range(17600, 17700))
    return lambda: next(counter)


def _sides(fakes, names):
    return {n: channel.Side(fakes.connector(n), f"198.18.0.{i + 2}", "/opt/p2p/.venv/bin/python", f"/run/{n}",
                            channel.transport_env("tcp", "eth0")) for i, n in enumerate(names)}


def test_many_to_one_gives_each_source_its_server_and_one_to_many_shares_the_hubs(fakes):
    sides = _sides(fakes, ["h1", "h2", "h3"])
    m2o = transfer_patterns.plan_links("many-to-one", "h1", ["h2", "h3"], sides, _ports())
    assert [(k.source, k.reader) for k in m2o] == [("h2", "h1"), ("h3", "h1")]
    assert len({k.ports.transfer for k in m2o}) == 2 and len({k.ports.listen for k in m2o}) == 2
    o2m = transfer_patterns.plan_links("one-to-many", "h1", ["h2", "h3"], sides, _ports())
    assert [(k.source, k.reader) for k in o2m] == [("h1", "h2"), ("h1", "h3")]
    assert len({k.ports.transfer for k in o2m}) == 1 and len({k.ports.listen for k in o2m}) == 2
    with pytest.raises(BadInput, match="at least two nodes"):
        transfer_patterns.plan_links("one-to-many", "h1", [], sides, _ports())
    with pytest.raises(BadInput, match="--pattern 'ring'"):
        transfer_patterns.plan_links("ring", "h1", ["h2"], sides, _ports())


def test_a_one_to_many_round_starts_one_server_and_every_reader_at_one_time(fakes):
    sides = _sides(fakes, ["h1", "h2", "h3"])
    links = transfer_patterns.plan_links("one-to-many", "h1", ["h2", "h3"], sides, _ports())
    proc = channel.server_proc(sides["h1"], links[0].ports)
    sides["h1"].conn.expect(expect("mkdir -p /run/h1"), start(proc),
                            fact(log_grep_fact(proc.log, [re.escape(channel.READY_LINE)], 1), "[server] ready"),
                            act(lambda c: procs.stop(c, proc, grace_s=10), "stopped\n"))
    text = (CAPTURED / "client_ok_1.txt").read_text() + "\n[p2p] start wait 1.250\n[p2p] main returned 0\n"
    for n in ("h2", "h3"):
        sides[n].conn.expect(expect(re.compile(r"export P2P_START_AT=\d+\.\d+; .*--num-objects 1 ", re.S), Result(
            "", "", 139, text)))
    rounds = transfer_patterns.run_links(links, channel.Options(MIB, (1,)), lead_s=5)
    starts = {re.search(r"P2P_START_AT=([\d.]+)", sides[n].conn.commands[0])[1] for n in ("h2", "h3")}
    assert len(starts) == 1  # both readers got the same start
    row = transfer_patterns.aggregate(rounds[0])
    assert row["ok"] and row["overlapped"] and row["payload_bytes"] == 2 * MIB and len(row["links"]) == 2
    assert "exited 139" in row["note"]


def test_the_aggregate_is_every_readers_bytes_over_the_slowest_and_a_late_reader_is_flagged():
    fast = channel.ChannelRun(MIB, 4, ok=True, p50_ms=2.0, p99_ms=3.0, verified=True, start_wait_s=0.5)
    slow = channel.ChannelRun(MIB, 4, ok=True, p50_ms=8.0, p99_ms=9.0, verified=True, start_wait_s=-0.2)
    row = transfer_patterns.aggregate([fast, slow])
    assert row["p50_ms"] == 8.0 and row["median_gbps"] == round(8 * MIB / 8.0 / 1e6, 3) and row["p99_ms"] == 9.0
    assert row["overlapped"] is False
    failed = transfer_patterns.aggregate([fast, channel.ChannelRun(MIB, 4, error="RuntimeError: read failed")])
    assert not failed["ok"] and failed["median_gbps"] is None and "read failed" in failed["error"]
