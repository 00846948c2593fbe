"""The network fault scenarios refuse a fleet whose nodes have no interface of their own, naming why; from the
default set they are listed as skipped instead (no processes are started here)."""

from __future__ import annotations

import pytest

from p2p_ops.errors import BadInput
from p2p_ops.harness import faults
from p2p_ops.lifecycle.context import FleetContext
from tests.conftest import write_local_fleet

OPTS = faults.FaultOptions.quick()


def test_network_faults_are_refused_on_a_local_fleet(tmp_path):
    with FleetContext.load(write_local_fleet(tmp_path / "fleet.yaml", 2, name="loc")) as ctx:
        assert "connection: local" in faults.why_not(ctx, "link_cut")
        assert faults.why_not(ctx, "l1_full") == ""
        with pytest.raises(BadInput, match="link_cut: node .* connection: local"):
            faults.run_faults(ctx, ["link_cut"], OPTS, tmp_path / "out")
        skipped = faults.run_faults(ctx, ["slow_peer"], OPTS, tmp_path / "out", explicit=False)
        assert skipped[0].skipped and "skipped" in (tmp_path / "out" / "faults.md").read_text()


def test_inflight_reads_the_three_counts_of_a_status_body():
    from p2p_ops.harness.faults import drain

    body = {"active_p2p_lookup_jobs": 1, "active_prefetch_jobs": 2,
            "storage_manager": {"l1_manager": {"read_locked_count": 18, "memory_used_bytes": 5}}}
    assert drain.inflight(body) == {"active_p2p_lookup_jobs": 1, "active_prefetch_jobs": 2, "read_locked_count": 18}
    assert drain.inflight({}) is None
    assert drain.total({"a": drain.inflight(body), "b": None}) == 21


def test_table_names_undrained_lookups_and_skipped_scenarios():
    ran = faults.Figures("slow_peer", "h1:eth0 800 kbit/s", sent=3, recovered=True, lookups_inflight_before=0,
                         lookups_inflight_max=27, lookups_inflight_end=6, lookups_drained=False,
                         extra={"p2p_load_timeout_s": 2.0})
    skipped = faults.Figures("link_cut", "-", skipped="node n is connection: local")
    text = faults.table_markdown([ran, skipped], OPTS)
    assert "NO (6 left), 0 at rest before, max 27 in flight" in text and "p2p_load_timeout_s=2.0" in text
    assert "| link_cut |" in text and "skipped: node n is connection: local" in text
    assert faults.passed([ran, skipped])  # undrained is reported, not a failed request
