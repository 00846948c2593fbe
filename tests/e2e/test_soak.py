"""`p2pctl test soak` on a real 3-node local fleet, shortened: the mixed load, samples of all seven processes,
slopes, proofs and plots land in the run folder, and a healthy fleet passes."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from tests.e2e.conftest import running_fleet

pytestmark = pytest.mark.e2e


def test_soak_on_a_three_node_fleet_leaves_slopes_and_plots(tmp_path, p2pctl):
    with running_fleet(tmp_path, n_nodes=3, name="soak") as ctx:
        code, out, err = p2pctl("test", "soak", "--duration", "40s", "--warmup", "10s", "--sample-every", "4",
                                "--proof-every", "15", "-f", str(ctx.fleet_file), "--json")
        doc = json.loads(out)
        run = Path(doc["run_dir"])
        assert code == 0 and doc["passed"], (run / "soak.md").read_text()
        data = json.loads((run / "soak.json").read_text())
        units = {u for u in data["cpu_percent"]}
        assert len(units) == 7  # coordinator, 3 servers, 3 engines
        assert len(data["proofs"]) >= 2 and all(p["passed"] for p in data["proofs"])
        slopes = {(t["unit"], t["metric"]): t for t in data["trends"]}
        assert all(slopes[(u, "anon_mib")]["slope_per_h"] is not None for u in units), slopes
        assert data["minutes"] and sum(m["requests"] for m in data["minutes"]) > 20
        with (run / "samples.csv").open() as f:
            rows = list(csv.DictReader(f))
        assert {r["unit"] for r in rows} == units and all(r["state"] == "running" for r in rows)
        assert any(r["lookup_jobs"] != "" for r in rows if r["role"] == "server")
        for plot in ("soak-anon-memory.png", "soak-fds.png", "soak-threads.png", "soak-ttft.png"):
            assert (run / plot).stat().st_size > 1000, plot
        assert json.loads((run / "run.json").read_text())["state"] == "complete"
        # A 30 s slope may see a process still warming up rise: it is reported, never judged (10 min to tell).
        md = (run / "soak.md").read_text()
        assert md.count("rose at the floor") == md.count("(a leak needs 600 s to tell)"), md
