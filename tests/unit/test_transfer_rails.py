"""`bench transfer`'s rail columns: each node's rail counters around one read window, through fake nodes, and
the pure rule that keeps only the rails whose bytes account for the window."""

from __future__ import annotations

from p2p_ops.bench import transfer_rails
from p2p_ops.diagnose.rails import RailUsage
from p2p_ops.facts.rail_counters import RAIL_COUNTERS
from tests.support.fake_connector import fact

MIB = 1 << 20
HEAD = ("Inter-|   Receive                                                |  Transmit\n"
        " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls "
        "carrier compressed\n")


def _dev(**ifaces: tuple[int, int]) -> str:
    """/proc/net/dev with (rx, tx) bytes per interface."""
    return HEAD + "".join(f"{n:>6}: {rx} 10 0 0 0 0 0 0 {tx} 10 0 0 0 0 0 0\n" for n, (rx, tx) in ifaces.items())


def test_the_rails_named_are_those_that_carried_the_flow():
    usage = [RailUsage("eth0", "net", 30 * MIB, 1 * MIB), RailUsage("eth1", "net", 2 * MIB, 0),
             RailUsage("lo", "net", 9 * MIB, 9 * MIB), RailUsage("mlx5_0:1", "rdma", 0, 0, reset=True)]
    assert [u.name for u in transfer_rails.moved(usage, {"source"}, 24 * MIB)] == ["eth0"]
    # the reader's rx: only lo received at least half of the window's bytes here
    assert [u.name for u in transfer_rails.moved(usage, {"reader"}, 16 * MIB)] == ["lo"]
    assert [u.name for u in transfer_rails.moved(usage, {"source", "reader"}, 16 * MIB)] == ["eth0", "lo"]
    assert transfer_rails.label([]) == "none"


def test_a_window_reads_each_node_before_and_after_and_names_its_rails(fakes):
    a, b = fakes.connector("h1"), fakes.connector("h2")
    a.expect(fact(RAIL_COUNTERS, _dev(eth0=(100, 1000), lo=(5, 5))),
             fact(RAIL_COUNTERS, _dev(eth0=(200, 1000 + 13 * MIB), lo=(5 * MIB, 5 * MIB))))
    b.expect(fact(RAIL_COUNTERS, _dev(eth0=(0, 0), lo=(0, 0))),
             fact(RAIL_COUNTERS, _dev(eth0=(12 * MIB, 100), lo=(0, 0))))
    rails, result = transfer_rails.measure({"source": [("h1", a)], "reader": [("h2", b)]}, 12 * MIB, lambda: "run")
    assert result == "run"
    assert [(r["node"], r["role"], r["name"]) for r in rails] == [("h1", "source", "eth0"), ("h2", "reader", "eth0")]
    assert rails[0]["tx_bytes"] == 13 * MIB and transfer_rails.label(rails) == "h1 eth0, h2 eth0"


def test_two_nodes_on_one_host_are_read_once(fakes):
    local = fakes.connector("localhost")
    local.expect(fact(RAIL_COUNTERS, _dev(lo=(0, 0))), fact(RAIL_COUNTERS, _dev(lo=(6 * MIB, 6 * MIB))))
    rails, _ = transfer_rails.measure({"source": [("node-a", local)], "reader": [("node-b", local)]}, 6 * MIB,
                                      lambda: None)
    assert [(r["node"], r["role"], r["name"]) for r in rails] == [("node-a=node-b", "reader+source", "lo")]


def test_the_table_says_why_a_one_host_sweep_names_no_rail():
    from p2p_ops.cli.bench_cmds import transfer_table

    row = {"payload_bytes": MIB, "num_objects": 2, "median_gbps": 5.0, "p50_ms": 0.2, "p99_ms": 0.3,
           "memcpy_gbps": 30.0, "ok": True, "error": "", "rails": []}
    text = transfer_table({"rows": [row], "rails_note": transfer_rails.ONE_HOST_NOTE})
    assert text.splitlines()[1].split()[-1] == "none" and "shared memory" in text
    one = {"source": [("a", _Conn("localhost"))], "reader": [("b", _Conn("localhost"))]}
    assert transfer_rails.one_host(one) and not transfer_rails.one_host({**one, "reader": [("b", _Conn("198.18.0.3"))]})
    from p2p_ops.connectors.local import LocalConnector

    # a local fleet's nodes each get a LocalConnector named after the node: still one machine
    assert transfer_rails.one_host({"source": [("a", LocalConnector("node-a"))], "reader": [("b", LocalConnector("node-b"))]})


class _Conn:
    def __init__(self, host: str):
        self.host = host
