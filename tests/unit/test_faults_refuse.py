"""The network fault scenarios refuse a fleet whose nodes have no interface of their own, naming why; from the
default set they are listed as skipped instead (no processes are started here)."""

from __future__ import annotations

import pytest

from p2p_ops import launch
from p2p_ops.errors import BadInput
from p2p_ops.harness import faults
from tests.conftest import write_local_fleet

OPTS = faults.FaultOptions.quick()


def test_network_faults_are_refused_on_a_local_fleet(tmp_path):
    ctx = launch.FleetContext.load(write_local_fleet(tmp_path / "fleet.yaml", 2, name="loc"))
    try:
        assert "connection: local" in faults.why_not(ctx, "link_cut")
        assert faults.why_not(ctx, "l1_full") == ""
        with pytest.raises(BadInput, match="link_cut: node .* connection: local"):
            faults.run_faults(ctx, ["link_cut"], OPTS, tmp_path / "out")
        skipped = faults.run_faults(ctx, ["slow_peer"], OPTS, tmp_path / "out", explicit=False)
        assert skipped[0].skipped and "skipped" in (tmp_path / "out" / "faults.md").read_text()
    finally:
        ctx.close()
