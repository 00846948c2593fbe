"""L1 full under load: distinct long prompts fill one server's L1 until it evicts, while clients keep asking
about the shared documents on every engine. No client request may fail (an evicted prefix is recomputed).

The smallest L1 the spec allows is 1 GB (l1_size_gb is an integer there). LMCache evicts from a watermark of
L1 (80 % by default); this fleet sets it to 10 % (`--eviction-trigger-watermark 0.1` through
settings.server_extra_args), so eviction starts after ~35 prompts of 1500 tokens instead of ~280 on this CPU
engine: the same eviction path, a bounded test.
"""

from __future__ import annotations

import pytest

from p2p_ops.harness import faults
from p2p_ops.spec.starter import local_fleet
from tests.e2e.conftest import running_fleet

pytestmark = pytest.mark.e2e

OPTS = faults.FaultOptions.quick()


def test_l1_full_evicts_and_every_request_is_served(tmp_path):
    base = local_fleet(2, name="l1")
    settings = {**base["settings"], "l1_size_gb": 1,
                "server_extra_args": ["--eviction-trigger-watermark", "0.1"]}
    with running_fleet(tmp_path, name="l1full", settings=settings) as ctx:
        fig, samples = faults.run_scenario(ctx, "l1_full", OPTS)
    print(faults.table_markdown([fig], OPTS))
    assert fig.recovered, fig
    assert fig.extra["watermark"] == 0.1
    assert fig.extra["full"], fig.extra           # L1 evicted (or reached the watermark) within the bounded fill
    assert fig.extra["fill_prompts"] > 0 and fig.sent_by_phase["during"] >= fig.extra["fill_prompts"]
    assert fig.failed == 0, fig.note              # every request served, evicted prefixes recomputed
    assert fig.lookups_drained, fig.extra["inflight_by_server"]
