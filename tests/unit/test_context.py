"""FleetContext as a context manager: its connectors close on the way out, also when the body raises."""

from __future__ import annotations

import pytest

from p2p_ops.lifecycle.context import FleetContext
from tests.conftest import write_local_fleet


class _Conn:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_with_closes_every_connector_even_on_error(tmp_path):
    path = write_local_fleet(tmp_path / "fleet.yaml", 2, name="ctxm")
    conns = [_Conn(), _Conn()]
    with pytest.raises(RuntimeError):
        with FleetContext.load(path) as ctx:
            ctx._conns.update({"node-a": conns[0], "node-b": conns[1]})
            raise RuntimeError("boom")
    assert all(c.closed for c in conns) and ctx._conns == {}


def test_connectors_are_made_once_per_node_and_reopen_after_close(tmp_path):
    with FleetContext.load(write_local_fleet(tmp_path / "fleet.yaml", 2, name="ctxr")) as ctx:
        node = ctx.fleet.nodes[0]
        first = ctx.conn(node)
        assert ctx.conn(node) is first
    assert ctx.conn(node) is not first  # a closed context makes a new connector when asked again
    ctx.close()
