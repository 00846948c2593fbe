"""An engine killed mid-stage: its failures are counted on that node and the stage FAILs in the report."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import pytest

from p2p_ops.harness.rundir import new_run_dir
from p2p_ops.harness.stress import StressOptions, run_stress
from p2p_ops.lifecycle import procs
from p2p_ops.observe.records import read_csv
from p2p_ops.observe.report import build_report

pytestmark = pytest.mark.e2e


@pytest.mark.breaks_fleet2(1)
def test_engine_killed_mid_stage_is_reported_as_failures_on_that_node(fleet2):
    node, inst = fleet2.fleet.instance("node-b-0")
    out_dir = new_run_dir(fleet2.layout, "killed")
    opts = StressOptions(stages=["sustained"], sustained_s=12, sustained_concurrency=2, doc_tokens=512,
                         max_tokens=4, seed=99)
    pid = procs.states(fleet2.conn(node), [fleet2.proc("engine", inst)])[0].pid
    assert pid

    def kill_later():
        time.sleep(5)
        os.kill(pid, signal.SIGKILL)

    killer = threading.Thread(target=kill_later)
    killer.start()
    run_stress(fleet2, opts, out_dir)
    killer.join()
    report = build_report(out_dir)
    text = report.summary.read_text()
    assert not report.passed
    failed = [r for r in read_csv(out_dir / "requests.csv") if not r.ok]
    assert failed and {r.instance for r in failed} == {"node-b-0"}
    assert "sustained: no failed requests | **FAIL**" in text and "node-b-0:" in text
    json.loads((out_dir / "stages.json").read_text())
