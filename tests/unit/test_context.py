"""FleetContext: one connector per node from its `connect=`, all closed on the way out (also when the body
raises), and made again when asked after a close."""

from __future__ import annotations

import pytest

from p2p_ops.lifecycle.context import FleetContext
from tests.conftest import write_local_fleet
from tests.support.fake_connector import FakeConnector


class Connect:
    """A `connect=` that makes a fresh fake per call and remembers them."""

    def __init__(self) -> None:
        self.made: list[FakeConnector] = []

    def __call__(self, node) -> FakeConnector:
        self.made.append(FakeConnector(node.name if node is not None else "local"))
        return self.made[-1]


def test_with_closes_every_connector_even_on_error(tmp_path):
    path = write_local_fleet(tmp_path / "fleet.yaml", 2, name="ctxm")
    connect = Connect()
    with pytest.raises(RuntimeError):
        with FleetContext.load(path, connect=connect) as ctx:
            for node in ctx.fleet.nodes:
                ctx.conn(node)
            raise RuntimeError("boom")
    assert [c.host for c in connect.made] == ["node-a", "node-b"] and all(c.closed for c in connect.made)
    ctx.conn(ctx.fleet.nodes[0])  # closed connectors are forgotten: the next use connects again
    assert [c.host for c in connect.made] == ["node-a", "node-b", "node-a"]


def test_connectors_are_made_once_per_node_and_reopen_after_close(tmp_path):
    connect = Connect()
    with FleetContext.load(write_local_fleet(tmp_path / "fleet.yaml", 2, name="ctxr"), connect=connect) as ctx:
        node = ctx.fleet.nodes[0]
        first = ctx.conn(node)
        assert ctx.conn(node) is first and ctx.conn(None) is not first
        assert [c.host for c in connect.made] == ["node-a", "local"]
    again = ctx.conn(node)
    assert again is not first and not again.closed  # a closed context makes a new connector when asked again
    ctx.close()
    assert again.closed


def test_the_default_connect_reaches_local_nodes_on_this_machine(tmp_path):
    from p2p_ops.connectors import LocalConnector

    with FleetContext.load(write_local_fleet(tmp_path / "fleet.yaml", 2, name="ctxd")) as ctx:
        conn = ctx.conn(ctx.fleet.nodes[1])
        assert isinstance(conn, LocalConnector) and conn.host == "node-b"
