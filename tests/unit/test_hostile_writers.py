"""Writers and readers that once went around `files.py` (issue 27 item 5, issue 31 item 5): planted links and
hard links in run folders, `--run-dir` and `-o` naming a link, and modes that followed the umask. Each test
reproduces a case that failed before the fix.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from p2p_ops.lifecycle import launch, prometheus
from p2p_ops.lifecycle.context import FleetContext
from tests.conftest import REPO, write_local_fleet

SECRET = "TOPSECRET-hardlinked-0123"


def cli(*argv: str, umask: int | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "LMCACHE_TRACK_USAGE": "false"}
    return subprocess.run([sys.executable, "-m", "p2p_ops.cli", *argv], capture_output=True, text=True,
                          timeout=timeout, env=env, stdin=subprocess.DEVNULL,
                          preexec_fn=None if umask is None else (lambda: os.umask(umask)))


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def outside(tmp_path: Path, text: str = f"root:{SECRET}:19000:0:99999:7:::\n") -> Path:
    target = tmp_path / "outside" / "shadow"
    target.parent.mkdir(exist_ok=True)
    target.write_text(text)
    target.chmod(0o644)
    return target


def rendered(tmp_path: Path) -> FleetContext:
    ctx = FleetContext.load(write_local_fleet(tmp_path / "fleet.yaml", 2, name="w"))
    launch.render(ctx)
    return ctx


# ---- planted links at what the tool writes ---------------------------------------------------------------------

def test_prometheus_files_replace_planted_links_and_never_chmod_their_targets(tmp_path):
    ctx = rendered(tmp_path)
    d = prometheus.prom_dir(ctx)
    d.mkdir(mode=0o700)
    victims = {}
    for name in ("start_prometheus.sh", "prometheus.yml", prometheus.RULES_FILE):
        victims[name] = tmp_path / f"victim-{name}"
        victims[name].write_text("keep me\n")
        victims[name].chmod(0o644)
        (d / name).symlink_to(victims[name])
    prometheus.write_files(ctx, "/usr/bin/prometheus")
    for name, victim in victims.items():
        assert victim.read_text() == "keep me\n" and mode(victim) == 0o644, name
        assert not (d / name).is_symlink()
    assert mode(d / "start_prometheus.sh") == 0o700 and mode(d / "prometheus.yml") == 0o600
    assert mode(d) == 0o700 and mode(d / "data") == 0o700


def test_grafana_output_replaces_a_link_never_its_target(tmp_path, p2pctl):
    f = write_local_fleet(tmp_path / "fleet.yaml", 1, name="g")
    target = tmp_path / "important.json"
    target.write_text("keep me\n")
    link = tmp_path / "board.json"
    link.symlink_to(target)
    code, _, err = p2pctl("grafana", "-f", str(f), "-o", str(link))
    assert code == 0, err
    assert target.read_text() == "keep me\n"
    assert not link.is_symlink() and '"panels"' in link.read_text() and mode(link) == 0o600


def test_run_dir_naming_a_link_is_refused_before_anything_is_chmodded_or_written(tmp_path, p2pctl):
    f = write_local_fleet(tmp_path / "fleet.yaml", 1, name="l")
    victim = tmp_path / "victim"
    victim.mkdir()
    victim.chmod(0o755)
    link = tmp_path / "run-link"
    link.symlink_to(victim)
    code, _, err = p2pctl("render", "-f", str(f), "--run-dir", str(link))
    assert code == 2 and "symbolic link" in err and len(err.strip().splitlines()) == 1, err
    assert mode(victim) == 0o755 and not any(victim.iterdir())


# ---- hard links out of a run folder or snapshot ----------------------------------------------------------------

def test_bundle_refuses_a_hard_linked_log(tmp_path):
    ctx = rendered(tmp_path)
    log = Path(ctx.proc(ctx.unit("server", "node-a-0")).log)
    os.link(outside(tmp_path), log)
    out = tmp_path / "b.tar.gz"
    res = cli("bundle", "-f", str(ctx.fleet_file), "-o", str(out), "--json", "--no-doctor")
    assert res.returncode == 0, res.stderr
    with tarfile.open(out) as tar:
        everything = b"".join(tar.extractfile(m).read() for m in tar.getmembers() if m.isfile())
        manifest = next(m for m in tar.getmembers() if m.name.endswith("manifest.json"))
        manifest_text = tar.extractfile(manifest).read().decode()
    assert SECRET.encode() not in everything and SECRET not in res.stdout
    assert "hard link" in manifest_text and "node-a-0/server.log" in manifest_text


def test_rdma_root_refuses_a_file_hard_linked_from_outside_the_snapshot(tmp_path):
    import shutil

    root = tmp_path / "snap"
    shutil.copytree(REPO / "tests" / "fixtures" / "diagnose" / "rdma" / "roce_healthy", root)
    fw = next(root.rglob("fw_ver"))
    fw.unlink()
    os.link(outside(tmp_path), fw)
    res = cli("rdma", "--root", str(root), "--json")
    assert SECRET not in res.stdout + res.stderr
    assert res.returncode == 2 and "hard link" in res.stderr and "fw_ver" in res.stderr, res.stderr


def test_rdma_root_takes_hard_links_that_stay_inside_the_snapshot(tmp_path):
    import shutil

    root = tmp_path / "snap"
    shutil.copytree(REPO / "tests" / "fixtures" / "diagnose" / "rdma" / "roce_healthy", root)
    fw = next(root.rglob("fw_ver"))
    os.link(fw, fw.with_name("fw_ver.copy"))  # what `cp -a` or tar keep of a tree's own hard links
    res = cli("rdma", "--root", str(root), "--json")
    assert res.returncode in (0, 1), res.stderr


def test_files_read_within_refuses_a_hard_link(tmp_path):
    from p2p_ops import files

    run = tmp_path / "run"
    run.mkdir()
    os.link(outside(tmp_path), run / "result.json")
    with pytest.raises(files.Refused, match="hard link"):
        files.read_text(run / "result.json", within=run)
    with pytest.raises(files.Refused, match="hard link"):
        files.read_text(run / "result.json", follow=False)


# ---- modes, whatever the umask ---------------------------------------------------------------------------------

def test_test_run_folders_are_private_and_env_copies_0600(tmp_path):
    from p2p_ops.harness.rundir import new_run_dir

    ctx = rendered(tmp_path)
    run = new_run_dir(ctx.layout, "basic")
    assert mode(ctx.layout.tests) == 0o700 and mode(run) == 0o700 and mode(run / "env") == 0o700
    copies = sorted((run / "env").iterdir())
    assert copies and all(mode(c) == 0o600 for c in copies), [(c.name, oct(mode(c))) for c in copies]


def test_test_run_env_copies_refuse_a_linked_env_sh(tmp_path):
    from p2p_ops.harness.rundir import new_run_dir

    ctx = rendered(tmp_path)
    env = ctx.layout.env("node-a-0")
    env.unlink()
    env.symlink_to(outside(tmp_path))
    run = new_run_dir(ctx.layout, "basic")
    assert SECRET not in "".join(p.read_text() for p in (run / "env").iterdir())


def test_bundle_folders_are_0700_under_umask_000(tmp_path):
    ctx = rendered(tmp_path)
    out = tmp_path / "made" / "by" / "bundle" / "b.tar.gz"
    res = cli("bundle", "-f", str(ctx.fleet_file), "-o", str(out), "--no-doctor", umask=0)
    assert res.returncode == 0, res.stderr
    assert [mode(p) for p in (out.parent, out.parent.parent, out.parent.parent.parent)] == [0o700] * 3
    assert mode(out) == 0o600
    res = cli("bundle", "-f", str(ctx.fleet_file), "--no-doctor", umask=0)
    assert res.returncode == 0, res.stderr
    bundles = ctx.layout.root / "bundles"
    assert mode(bundles) == 0o700 and all(mode(p) == 0o600 for p in bundles.iterdir())


def test_report_summary_is_0600(tmp_path, p2pctl):
    from p2p_ops.observe.records import RequestRecord, write_csv

    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    write_csv(run / "requests.csv", [RequestRecord("ladder", 1, "a-0", "a", "", "p", 0.0, 10, 0, 1, 0.1, 0.2, True)])
    code, _, err = p2pctl("report", str(run))
    assert code in (0, 1), err
    assert mode(run / "summary.md") == 0o600 and mode(run / "requests.csv") == 0o600
    assert all(mode(p) == 0o600 for p in run.glob("*.png"))


def test_rails_snapshot_is_0600(tmp_path, p2pctl):
    import shutil

    sysfs = tmp_path / "sys"
    shutil.copytree(REPO / "tests" / "fixtures" / "diagnose" / "rdma" / "roce_healthy" / "sys", sysfs)
    snap = tmp_path / "snap.json"
    code, _, err = p2pctl("rails", "--sysfs-root", str(sysfs), "--save-snapshot", str(snap))
    assert code == 0, err
    assert mode(snap) == 0o600
