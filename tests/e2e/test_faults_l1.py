"""L1 full under load: distinct long prompts fill one server's L1 until it evicts, while clients keep asking
about the shared documents on every engine. No client request may fail (an evicted prefix is recomputed).

The smallest L1 the spec allows is 1 GB (LMCache takes fractions, the spec's l1_size_gb is an integer). The
fleet's engine has 64 layers of width 256 (64 KiB of KV per token instead of 2), so L1 reaches LMCache's
eviction watermark (80 %) after ~9 prompts of 1500 tokens instead of ~280: the same eviction path, bounded.
"""

from __future__ import annotations

import dataclasses

import pytest

from p2p_ops.fleet import local_fleet
from p2p_ops.harness import faults
from tests.e2e.conftest import running_fleet

pytestmark = pytest.mark.e2e

OPTS = dataclasses.replace(faults.FaultOptions.quick(), fill_timeout_s=240.0)


def test_l1_full_evicts_and_every_request_is_served(tmp_path):
    base = local_fleet(2, name="l1")
    settings = {**base["settings"], "l1_size_gb": 1}
    engine = {**base["engine"], "num_layers": 64, "num_heads": 4, "head_size": 64}
    with running_fleet(tmp_path, name="l1full", settings=settings, engine=engine) as ctx:
        fig, samples = faults.run_scenario(ctx, "l1_full", OPTS)
    print(faults.table_markdown([fig], OPTS))
    assert fig.recovered, fig
    assert fig.extra["full"], fig.extra           # L1 evicted (or reached the watermark) within the bounded fill
    assert fig.extra["fill_prompts"] > 0 and fig.sent_by_phase["during"] >= fig.extra["fill_prompts"]
    assert fig.failed == 0, fig.note              # every request served, evicted prefixes recomputed
    assert fig.lookups_drained, fig.extra["inflight_by_server"]
