"""Hostile files on disk: links out of the folder, FIFOs, folders others own or can write, planted env.sh lines,
wrong-shaped inputs. Nothing makes the toolkit follow, run, leak, hang or crash (issue 20, "Hostile files").

Commands that could hang run in a child process with a timeout, so a regression fails instead of stalling the
suite.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from p2p_ops.lifecycle import launch
from p2p_ops.lifecycle.context import FleetContext
from p2p_ops.spec.starter import local_fleet
from tests.conftest import REPO, write_local_fleet

TREES = REPO / "tests" / "fixtures" / "diagnose" / "rdma"
SECRET = "TOPSECRET-shadow-line-0123"


def cli(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """p2pctl in a child process (a hang fails the test after `timeout` instead of stalling the suite)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "LMCACHE_TRACK_USAGE": "false"}
    return subprocess.run([sys.executable, "-m", "p2p_ops.cli", *argv], capture_output=True, text=True,
                          timeout=timeout, env=env, stdin=subprocess.DEVNULL)


def outside_secret(tmp_path: Path) -> Path:
    target = tmp_path / "outside" / "shadow"
    target.parent.mkdir()
    target.write_text(f"root:{SECRET}:19000:0:99999:7:::\n")
    return target


def rendered(tmp_path: Path, name: str = "h") -> FleetContext:
    ctx = FleetContext.load(write_local_fleet(tmp_path / "fleet.yaml", 2, name=name))
    launch.render(ctx)
    return ctx


def unpack(bundle: Path, dest: Path) -> tuple[Path, dict]:
    with tarfile.open(bundle) as tar:
        tar.extractall(dest, filter="data")
    [root] = [p for p in dest.iterdir() if p.is_dir()]
    return root, json.loads((root / "manifest.json").read_text())


# ---- following links out of the run folder -----------------------------------------------------------------

def test_bundle_refuses_a_log_linked_out_of_the_run_folder_and_says_so(tmp_path):
    ctx = rendered(tmp_path)
    log = Path(ctx.proc(ctx.unit("server", "node-a-0")).log)
    log.symlink_to(outside_secret(tmp_path))
    out = tmp_path / "b.tar.gz"
    res = cli("bundle", "-f", str(ctx.fleet_file), "-o", str(out), "--json", "--no-doctor")
    assert res.returncode == 0, res.stderr
    root, manifest = unpack(out, tmp_path / "x")
    everything = "".join(p.read_text(errors="replace") for p in root.rglob("*") if p.is_file())
    assert SECRET not in everything + res.stdout
    refused = [r for r in manifest["refused"] if r["source"].endswith("node-a-0/server.log")]
    assert refused and "symbolic link" in refused[0]["reason"], manifest["refused"]


def test_bundle_refuses_an_instance_folder_linked_elsewhere(tmp_path):
    ctx = rendered(tmp_path)
    inst = ctx.layout.dir("node-b-0")
    elsewhere = tmp_path / "outside-run"
    shutil.copytree(inst, elsewhere)
    (elsewhere / "server.log").write_text(SECRET + "\n")
    shutil.rmtree(inst)
    inst.symlink_to(elsewhere)
    out = tmp_path / "b.tar.gz"
    res = cli("bundle", "-f", str(ctx.fleet_file), "-o", str(out), "--json", "--no-doctor")
    assert res.returncode == 0, res.stderr
    root, manifest = unpack(out, tmp_path / "x")
    assert SECRET not in "".join(p.read_text(errors="replace") for p in root.rglob("*") if p.is_file())
    assert any("outside" in r["reason"] for r in manifest["refused"]), manifest["refused"]


@pytest.mark.parametrize("which", ["run", "instance"])
def test_render_never_chmods_through_a_linked_folder(tmp_path, p2pctl, which):
    f = write_local_fleet(tmp_path / "fleet.yaml", 2, name="r")
    ctx = FleetContext.load(f)
    victim = tmp_path / "victim"
    victim.mkdir(mode=0o755)
    victim.chmod(0o755)
    if which == "run":
        ctx.layout.root.parent.mkdir(parents=True)
        ctx.layout.root.symlink_to(victim)
    else:
        ctx.layout.root.mkdir(parents=True)
        ctx.layout.dir("node-a-0").symlink_to(victim)
    code, out, err = p2pctl("render", "-f", str(f))
    assert code == 2 and "symbolic link" in err and len(err.strip().splitlines()) == 1, err
    assert stat.S_IMODE(victim.stat().st_mode) == 0o755 and not any(victim.iterdir())


def test_init_force_replaces_a_linked_fleet_file_never_its_target(tmp_path, p2pctl):
    target = tmp_path / "important.conf"
    target.write_text("keep me\n")
    link = tmp_path / "fleet.yaml"
    link.symlink_to(target)
    code, _, err = p2pctl("init", "--local", "1", "-o", str(link), "--force")
    assert code == 0, err
    assert target.read_text() == "keep me\n"
    assert not link.is_symlink() and "nodes:" in link.read_text()


@pytest.mark.parametrize("where", ["missing-folder/fleet.yaml", "a-folder"])
def test_init_into_a_missing_folder_or_onto_a_folder_is_one_line(tmp_path, p2pctl, where):
    (tmp_path / "a-folder").mkdir()
    code, out, err = p2pctl("init", "--local", "1", "-o", str(tmp_path / where), "--force")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err


def snapshot_copy(tmp_path: Path, case: str = "roce_healthy") -> Path:
    root = tmp_path / "snap"
    shutil.copytree(TREES / case, root)
    return root


def test_rdma_root_refuses_links_out_of_the_snapshot(tmp_path):
    root = snapshot_copy(tmp_path)
    fw = next(root.rglob("fw_ver"))
    fw.unlink()
    fw.symlink_to(outside_secret(tmp_path))
    res = cli("rdma", "--root", str(root), "--json")
    assert SECRET not in res.stdout + res.stderr
    assert res.returncode == 2 and "outside" in res.stderr and "fw_ver" in res.stderr, res.stderr


def test_rdma_root_follows_links_that_stay_inside(tmp_path):
    root = snapshot_copy(tmp_path)
    fw = next(root.rglob("fw_ver"))
    real = fw.with_name("fw_ver.real")
    fw.rename(real)
    fw.symlink_to(real.name)
    res = cli("rdma", "--root", str(root), "--json")
    assert res.returncode in (0, 1), res.stderr


# ---- hangs -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("relative", ["proc/modules", "tools/ucx_info_d.txt", "sys/class/net/lo/mtu"])
def test_rdma_root_refuses_a_fifo_instead_of_blocking(tmp_path, relative):
    root = snapshot_copy(tmp_path)
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    os.mkfifo(path)
    res = cli("rdma", "--root", str(root), timeout=60)
    assert res.returncode == 2 and "FIFO" in res.stderr and relative.split("/")[-1] in res.stderr, res.stderr


def test_ucx_trace_refuses_a_fifo_and_a_device(tmp_path):
    fifo = tmp_path / "trace.log"
    os.mkfifo(fifo)
    for path, word in ((fifo, "FIFO"), ("/dev/zero", "device")):
        res = cli("ucx-trace", str(path), timeout=60)
        assert res.returncode == 2 and word in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr


# ---- a dry run that runs things ------------------------------------------------------------------------------

def test_dry_run_never_executes_a_planted_env_sh_line(tmp_path):
    ctx = rendered(tmp_path)
    pwned = tmp_path / "pwned"
    env_sh = ctx.layout.env("node-a-0")
    env_sh.write_text(env_sh.read_text() + f"touch {pwned}\nexport EXTRA=$(touch {pwned}.2)\n")
    wrapper = ctx.layout.wrapper("node-b-0", "server")
    wrapper.write_text(wrapper.read_text().replace("exec nice", f"touch {pwned}.3\nexec nice"))
    res = cli("up", "-f", str(ctx.fleet_file), "--dry-run", "--no-render", "--json")
    assert not any(tmp_path.glob("pwned*")), "the dry run executed a line of env.sh or a wrapper"
    assert res.returncode == 0, res.stderr
    plan = json.loads(res.stdout)["plan"]
    a = "\n".join(plan["node-a"])
    assert f"touch {pwned}" in a and "not rendered by p2pctl" in a  # shown, not run
    assert f"touch {pwned}.3" in "\n".join(plan["node-b"])


def test_dry_run_shows_the_same_command_line_as_before(tmp_path):
    ctx = rendered(tmp_path)
    res = cli("up", "-f", str(ctx.fleet_file), "--dry-run", "--json")
    lines = json.loads(res.stdout)["plan"]["node-a"]
    server = next(x for x in lines if x.startswith("exec") and " server " in x)
    http = ctx.fleet.nodes[0].instances[0].ports.http
    assert f"--http-port {http}" in server and "--p2p-advertise-url 127.0.0.1:" in server


@pytest.mark.parametrize("how", ["world-writable", "group-writable", "other-owner"])
def test_untrusted_run_folders_are_refused_before_use(tmp_path, how):
    ctx = rendered(tmp_path)
    inst = ctx.layout.dir("node-a-0")
    if how == "other-owner":
        if os.geteuid() != 0:
            pytest.skip("giving a folder to another user needs root")
        os.chown(inst, 65534, 65534)
    else:
        inst.chmod(0o777 if how == "world-writable" else 0o770)
    for argv in (("up", "--dry-run", "--no-render"), ("up", "--no-render")):
        res = cli(*argv, "-f", str(ctx.fleet_file), timeout=120)
        assert res.returncode == 2, (argv, res.stdout, res.stderr)
        assert str(inst) in res.stderr and ("writable" in res.stderr or "owned by" in res.stderr), res.stderr


# ---- tracebacks instead of one line ----------------------------------------------------------------------------

@pytest.mark.parametrize("body", ["[1, 2]", '{"counters": [1]}', '{"counters": {"x": {"tx_bytes": "a"}}}',
                                  '{"counters": {"x": 5}}', '"just a string"', "{not json"])
def test_rails_before_with_json_of_the_wrong_shape_is_one_line(tmp_path, p2pctl, body):
    before = tmp_path / "before.json"
    before.write_text(body)
    code, out, err = p2pctl("rails", "--before", str(before), "--after", str(before))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "before.json" in err, err


@pytest.mark.parametrize("name,body", [
    ("requests.csv", "stage,instance\nx,y\n"),
    ("requests.csv", "\0\0\0binary"),
    ("basic/result.json", "{not json"),
    ("basic/result.json", '{"checks": [{"name": 1}]}'),
    ("basic/result.json", "[]"),
    ("stages.json", '{"stages": 5}'),
    ("lmcache-bench/result.json", '["x"]'),
])
def test_report_on_a_folder_with_malformed_files_is_one_line(tmp_path, p2pctl, name, body):
    run = tmp_path / "run"
    (run / name).parent.mkdir(parents=True, exist_ok=True)
    (run / name).write_text(body)
    if name == "stages.json":  # stages.json is read only beside real records
        from p2p_ops.observe.records import RequestRecord, write_csv

        write_csv(run / "requests.csv", [RequestRecord("ladder", 1, "a-0", "a", "", "p", 0.0, 10, 0, 1, 0.1, 0.2,
                                                       True)])
    code, out, err = p2pctl("report", str(run))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert name.split("/")[-1] in err


def test_report_refuses_files_linked_out_of_the_run_folder(tmp_path, p2pctl):
    run = tmp_path / "run"
    (run / "basic").mkdir(parents=True)
    (run / "basic" / "result.json").symlink_to(outside_secret(tmp_path))
    code, out, err = p2pctl("report", str(run))
    assert code == 2 and "symbolic link" in err and SECRET not in out + err


def test_spec_names_too_long_for_a_file_name_never_reach_render(tmp_path, p2pctl):
    data = local_fleet(1)
    data["nodes"][0]["instances"][0]["id"] = "i" * 300
    f = tmp_path / "fleet.yaml"
    f.write_text(yaml.safe_dump(data))
    code, out, err = p2pctl("render", "-f", str(f))
    assert code == 2 and "File name too long" not in err and "nodes[0].instances[0].id" in err, err


@pytest.mark.parametrize("kind", ["fifo", "device", "folder"])
def test_a_fleet_file_that_is_no_file_is_one_line(tmp_path, kind):
    f = tmp_path / "fleet.yaml"
    if kind == "fifo":
        os.mkfifo(f)
    elif kind == "device":
        f.symlink_to("/dev/zero")  # the file the user named is followed, and then refused for what it is
    else:
        f.mkdir()
    res = cli("validate", "-f", str(f), timeout=60)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert ("FIFO" if kind == "fifo" else "device" if kind == "device" else "folder") in res.stderr
