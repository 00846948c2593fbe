"""Issue 20's "Done when", as one scenario: a rendered fleet with a symlinked log, a FIFO, a planted env.sh line and
a 4 MB adversarial log. The bundle (with the doctor), the dry run and `rdma --root` finish, nothing outside the
folder is read, nothing is executed, and each refusal says why. The figures are printed (`-s` shows them); the
time bound is a hang guard, far above what they take.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from p2p_ops.lifecycle import launch
from p2p_ops.lifecycle.context import FleetContext
from tests.conftest import REPO, write_local_fleet

SECRET = "DONE-WHEN-SECRET-0123"
API_KEY = "PLANTEDapikey0123456789"


def _cli(*argv: str) -> tuple[subprocess.CompletedProcess, float]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "LMCACHE_TRACK_USAGE": "false"}
    start = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "p2p_ops.cli", *argv], capture_output=True, text=True, timeout=300,
                         env=env, stdin=subprocess.DEVNULL)
    return res, time.monotonic() - start


def _hostile_fleet(tmp_path: Path) -> tuple[FleetContext, Path]:
    ctx = FleetContext.load(write_local_fleet(tmp_path / "fleet.yaml", 2, name="done"))
    launch.render(ctx)
    secret = tmp_path / "outside" / "shadow"
    secret.parent.mkdir()
    secret.write_text(f"root:{SECRET}:19000::::::\n")
    Path(ctx.proc(ctx.unit("server", "node-a-0")).log).symlink_to(secret)
    os.mkfifo(ctx.proc(ctx.unit("engine", "node-b-0")).log)
    env_sh = ctx.layout.env("node-a-0")
    env_sh.write_text(env_sh.read_text() + f"touch {tmp_path / 'pwned'}\n")
    lines = ["[2026-11-30 02:28:01,789] LMCache INFO: stored cache_key=5f3a9c0d chunk_key=0xbeef size=262144\n",
             "prompt: " + f"api_key={API_KEY} " * 2000 + "\n", "cache_key=" * 5000 + "\n"]
    with open(ctx.proc(ctx.unit("server", "node-b-0")).log, "w") as f:
        while f.tell() < 4 << 20:
            f.writelines(lines)
    return ctx, secret


def test_hostile_run_folder_bundle_dry_run_and_rdma_root(tmp_path):
    ctx, secret = _hostile_fleet(tmp_path)
    out = tmp_path / "bundle.tar.gz"
    bundled, bundle_s = _cli("bundle", "-f", str(ctx.fleet_file), "-o", str(out), "--json")
    planned, plan_s = _cli("up", "-f", str(ctx.fleet_file), "--dry-run", "--no-render", "--json")
    snap = tmp_path / "snap"
    shutil.copytree(REPO / "tests" / "fixtures" / "diagnose" / "rdma" / "roce_healthy", snap)
    (snap / "proc" / "modules").unlink()
    os.mkfifo(snap / "proc" / "modules")
    rdma, rdma_s = _cli("rdma", "--root", str(snap), "--json")
    print(f"\nbundle {bundle_s:.1f} s, dry run {plan_s:.1f} s, rdma --root {rdma_s:.1f} s")

    assert bundled.returncode == 0, bundled.stderr
    manifest = json.loads(bundled.stdout)
    reasons = {Path(r["source"].split(":", 1)[1]).name + " " + r["source"].split("/")[-2]: r["reason"]
               for r in manifest["refused"]}
    assert "symbolic link" in reasons["server.log node-a-0"] and "not a regular file" in reasons["engine.log node-b-0"]
    with tarfile.open(out) as tar:
        tar.extractall(tmp_path / "x", filter="data")
    everything = "".join(p.read_text(errors="replace") for p in (tmp_path / "x").rglob("*") if p.is_file())
    assert SECRET not in everything and API_KEY not in everything
    assert "cache_key=5f3a9c0d chunk_key=0xbeef" in everything  # diagnostic values survive

    assert planned.returncode == 0, planned.stderr
    plan = "\n".join(json.loads(planned.stdout)["plan"]["node-a"])
    assert f"touch {tmp_path / 'pwned'}" in plan and "not rendered by p2pctl" in plan
    assert not (tmp_path / "pwned").exists()

    assert rdma.returncode == 2 and "modules" in rdma.stderr and "FIFO" in rdma.stderr
    assert max(bundle_s, plan_s, rdma_s) < 240
    assert secret.read_text().startswith("root:")  # read by nobody, changed by nobody
