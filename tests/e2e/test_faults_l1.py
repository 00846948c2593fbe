"""L1 full under load: distinct long prompts fill one server's L1 until it evicts, while clients keep asking
about the shared documents on every engine. No client request may fail (an evicted prefix is recomputed).

The smallest L1 the spec allows is 1 GB. The fleet's engine has 64 thin layers (16 KiB of KV per token instead
of 2, at about the prefill cost of the default model per token), so L1 reaches LMCache's eviction watermark
after ~18 prompts of 1500 tokens instead of ~280: the same eviction path, a bounded test.
"""

from __future__ import annotations

import pytest

from p2p_ops.fleet import local_fleet
from p2p_ops.harness import faults
from tests.e2e.conftest import running_fleet

pytestmark = pytest.mark.e2e

OPTS = faults.FaultOptions.quick()


def test_l1_full_evicts_and_every_request_is_served(tmp_path):
    base = local_fleet(2, name="l1")
    settings = {**base["settings"], "l1_size_gb": 1}
    engine = {**base["engine"], "num_layers": 64, "num_heads": 2, "head_size": 32}
    with running_fleet(tmp_path, name="l1full", settings=settings, engine=engine) as ctx:
        fig, samples = faults.run_scenario(ctx, "l1_full", OPTS)
    print(faults.table_markdown([fig], OPTS))
    assert fig.recovered, fig
    assert fig.extra["full"], fig.extra           # L1 evicted (or reached 98 %) within the bounded fill
    assert fig.extra["fill_prompts"] > 0 and fig.sent_by_phase["during"] >= fig.extra["fill_prompts"]
    assert fig.failed == 0, fig.note              # every request served, evicted prefixes recomputed
    assert fig.lookups_drained, fig.extra["inflight_by_server"]
