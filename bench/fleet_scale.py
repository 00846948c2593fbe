"""Fleet scale: `up`+`wait`, `status`, `doctor` and `bundle` for 1, 2, 4 (and 8) hosts over real SSH.

Hosts are the loopback-alias testbed (scripts/testbed.sh: one sshd per 127.0.0.x), brought up once for the
largest size; each size gets a fresh fleet on the first n hosts, always taken down. Every host runs a server
whose NIXL thread busy-polls a core, so on a small shared box the largest sizes measure CPU contention as
much as the toolkit: read the ratio to 1 host next to the load average.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import yaml

SIZES = {"tiny": [1], "quick": [1, 2], "full": [1, 2, 4, 8]}


def _timed(fn) -> float:
    t = time.monotonic()
    fn()
    return time.monotonic() - t


def run(report) -> None:
    from p2p_ops import bundle, fleet_status, launch
    from p2p_ops.context import FleetContext
    from p2p_ops.diagnose import doctor
    from tests.multinode.conftest import free_base_on, free_port_on
    from tests.support import testbed

    if not os.access("/usr/sbin/sshd", os.X_OK):
        report.failed("fleet", "needs /usr/sbin/sshd for the SSH testbed (apt-get install openssh-server)")
        return
    sizes = SIZES[report.size]
    cols = ["hosts", "up+wait s", "status s", "doctor s", "bundle s", "up+wait / 1 host", "status / 1 host",
            "doctor / 1 host", "bundle / 1 host"]
    t = report.table("fleet_scale", "Fleet operations over SSH vs number of hosts (seconds)", cols,
                     plot=("hosts", ["up+wait s", "status s", "doctor s", "bundle s"], "seconds", False))
    venv = Path(__file__).resolve().parent.parent / ".venv"
    with tempfile.TemporaryDirectory(prefix="bench-tb-") as tmp:
        tmp = Path(tmp)
        addresses = [f"127.0.0.{i + 2}" for i in range(max(sizes))]
        with testbed.running(max(sizes), tmp / "tb", port=free_port_on(addresses)) as tb:
            first = None
            for n in sizes:
                sub = testbed.Testbed(**{**tb.__dict__, "hosts": tb.hosts[:n]})
                base = free_base_on([h.address for h in sub.hosts], n)
                data = sub.fleet(f"scale{n}", venv=venv, run_root=tmp / f"run{n}", base=base)
                path = tmp / f"fleet{n}.yaml"
                path.write_text(yaml.safe_dump(data, sort_keys=False))
                with FleetContext.load(path) as ctx:
                    try:
                        row = {"hosts": n,
                               "up+wait s": _timed(lambda: (launch.up(ctx), launch.wait(ctx, timeout=240))),
                               "status s": _timed(lambda: fleet_status.report(ctx)),
                               "doctor s": _timed(lambda: doctor.run(ctx)),
                               "bundle s": _timed(lambda: bundle.collect(ctx, tmp / f"bundle{n}.tar.gz"))}
                    finally:
                        launch.down(ctx)
                first = first or row
                for k in ("up+wait", "status", "doctor", "bundle"):
                    row[f"{k} / 1 host"] = row[f"{k} s"] / first[f"{k} s"]
                report.add_row(t, **row)
    if len(t.rows) > 1:
        last = t.rows[-1]
        # The goal is set at 8 hosts; a smaller run (bench-quick) reports its ratio without judging it.
        report.target("up+wait at 8 hosts vs 1", "<= 1.5x", f"{last['up+wait / 1 host']:.2f}x at {last['hosts']} hosts",
                      last["up+wait / 1 host"] <= 1.5 if last["hosts"] >= 8 else None,
                      f"{last['up+wait s']:.0f} s vs {t.rows[0]['up+wait s']:.0f} s on {report.box['nproc']} CPUs"
                      + ("" if last["hosts"] >= 8 else "; 8 hosts only in make bench"))
