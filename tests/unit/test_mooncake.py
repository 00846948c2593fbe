"""Fleets on Mooncake's transfer engine (settings.transfer_engine: mooncake_te), without starting one: validate's
refusals (the wildcard listeners, rdma without a device, engines that would mix), what render hands Mooncake,
which build a node gets and the install script's rollback (run against a scripted fake venv), the probe's and the
doctor's word on a venv whose Mooncake does not import, the odd one out on another engine, and what a bundle
carries."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from p2p_ops.diagnose import doctor as D
from p2p_ops.errors import BadInput
from p2p_ops.facts.gpus import Gpu
from p2p_ops.facts.python_env import MOONCAKE_PIN, MOONCAKE_WHEELS, PythonEnv, parse_python
from p2p_ops.lifecycle.nic_plan import InstancePlan
from p2p_ops.lifecycle.preflight.bootstrap import mooncake_script, mooncake_wheel, needs_mooncake, pip_steps
from p2p_ops.lifecycle.preflight.readiness import assess_node
from p2p_ops.lifecycle.render import fleet_runs
from p2p_ops.spec.layout import RunLayout
from p2p_ops.spec.load import parse_fleet
from p2p_ops.spec.starter import local_fleet
from tests.unit.test_doctor import STATUS, env, fleet, inst, node, problems
from tests.unit.test_doctor_odd_one_out import spec, url

REPO = Path(__file__).resolve().parents[2]
NON_CUDA = MOONCAKE_WHEELS["cpu"]


def mooncake_data(**settings) -> dict:
    data = local_fleet(2, name="mc")
    data["settings"] |= {"transfer_engine": "mooncake_te", "mooncake_listen_any": True, **settings}
    return data


def refusal(data: dict) -> str:
    with pytest.raises(BadInput) as exc:
        parse_fleet(data)
    return str(exc.value)


# ---- validate ----------------------------------------------------------------------------------------------

def test_validate_refuses_mooncake_without_the_opt_in_and_names_its_sockets_and_the_ways_out():
    msg = refusal(mooncake_data(mooncake_listen_any=False))
    assert msg.startswith("settings.transfer_engine: mooncake_te opens two listeners per Mooncake transfer engine")
    for part in ("handshake RPC on 0.0.0.0", "TCP transport on [::]", "15000-17000", "hard-coded",
                 "Mooncake 0.3.13", "settings.mooncake_listen_any: true", "transfer_engine: nixl"):
        assert part in msg
    parse_fleet(mooncake_data())  # the opt-in


def test_validate_refuses_rdma_on_a_loopback_fleet_without_a_device():
    msg = refusal(mooncake_data(mooncake_protocol="rdma"))
    assert msg.startswith("settings.mooncake_protocol: rdma") and "settings.mooncake_device" in msg
    parse_fleet(mooncake_data(mooncake_protocol="rdma", mooncake_device="mlx5_0"))


@pytest.mark.parametrize("where", ["fleet", "instance"])
@pytest.mark.parametrize("words", [["--p2p-transfer-engine", "nixl"], ["--p2p-transfer=nixl"]])
def test_the_spec_cannot_mix_engines_through_extra_args(where, words):
    data = mooncake_data()
    target = data["settings"] if where == "fleet" else data["nodes"][1]["instances"][0].setdefault("settings", {})
    target["server_extra_args"] = words
    assert "settings.transfer_engine (every peer must agree)" in refusal(data)


def test_the_spec_cannot_give_one_instance_another_engine():
    data = mooncake_data()
    data["nodes"][1]["instances"][0]["settings"] = {"transfer_engine": "nixl"}
    assert refusal(data) == ("nodes[1].instances[0].settings.transfer_engine: must be identical across peers and "
                             "cannot be overridden per instance; set it once as settings.transfer_engine")


# ---- render ------------------------------------------------------------------------------------------------

def runs(data: dict, plans=None):
    return fleet_runs(parse_fleet(data), lambda n: RunLayout(Path("/srv/run")), plans)


def test_render_hands_mooncake_the_engine_protocol_and_device():
    a = runs(mooncake_data())["node-a-0"]
    assert a.command("server")[a.command("server").index("--p2p-transfer-engine") + 1] == "mooncake_te"
    assert a.env["MC_TE_PROTOCOL"] == "tcp" and "MC_TE_DEVICE" not in a.env
    rdma = runs(mooncake_data(mooncake_protocol="rdma", mooncake_device="mlx5_2"))["node-b-0"]
    assert rdma.env["MC_TE_PROTOCOL"] == "rdma" and rdma.env["MC_TE_DEVICE"] == "mlx5_2"
    nixl = runs(local_fleet(2, name="n"))["node-a-0"]
    assert not [k for k in nixl.env if k.startswith("MC_")]


def two_hosts(**settings) -> dict:
    data = mooncake_data(**settings)
    for i, n in enumerate(data["nodes"]):
        n |= {"connection": "ssh", "address": f"198.18.0.{i + 1}"}
    data["coordinator"]["host"] = "198.18.0.1"
    return data


def test_rdma_takes_the_nic_plans_hcas_and_refuses_an_instance_without_any():
    plans = {"node-a-0": InstancePlan("node-a-0", devices=["mlx5_0:1", "mlx5_0:2", "mlx5_1:1"], max_rma_rails=3),
             "node-b-0": InstancePlan("node-b-0", why="no active RDMA port: UCX picks (TCP)")}
    data = two_hosts(mooncake_protocol="rdma")
    with pytest.raises(BadInput, match="instance node-b-0 on node node-b has no RDMA device"):
        runs(data, plans)
    plans["node-b-0"] = InstancePlan("node-b-0", devices=["mlx5_3:1"], max_rma_rails=1)
    got = runs(data, plans)
    assert got["node-a-0"].env["MC_TE_DEVICE"] == "mlx5_0,mlx5_1" and got["node-b-0"].env["MC_TE_DEVICE"] == "mlx5_3"


# ---- install -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("gpus, torch, wheel", [
    (None, "2.13.0+cpu", "cpu"), ([], None, "cpu"),
    ([Gpu(0, "H100", driver="570.1")], "2.13.0+cu128", "cuda12"),
    ([Gpu(0, "H100", driver="570.1")], "2.13.0+cu130", "cuda13"),
    ([Gpu(0, "H100", driver="580.65")], "2.13.0", "cuda13"),
    ([Gpu(0, "H100", driver="550.1")], None, "cuda12"),
])
def test_each_node_gets_the_build_matching_its_gpus_and_cuda(gpus, torch, wheel):
    assert mooncake_wheel(gpus, torch) == MOONCAKE_WHEELS[wheel]


def test_bootstrap_replays_no_mooncake_line_and_make_setup_mooncake_runs_the_one_script():
    makefile = (REPO / "Makefile").read_text()
    assert not [s for s in pip_steps(makefile) if any("mooncake" in w for w in s)]
    assert "$(PY) -m p2p_ops.lifecycle.preflight.bootstrap $(VENV) | bash" in makefile


def fake_venv(tmp_path: Path, imports: bool) -> Path:
    """bin/pip records its arguments; bin/python fails the import like a box without libibverbs."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    scripts = {
        "pip": f'echo "$*" >> {venv}/pip.log\n[ "$1" = show ] && [ "$3" = mooncake-transfer-engine ] && exit 0\n'
               "exit 0\n",
        "python": "exit 0\n" if imports else
                  'echo "Traceback (most recent call last):" >&2\n'
                  'echo "ImportError: libibverbs.so.1: cannot open shared object file" >&2\nexit 1\n',
        "lmcache": "exit 0\n"}
    for name, body in scripts.items():
        (venv / "bin" / name).write_text("#!/bin/bash\n" + body)
        (venv / "bin" / name).chmod(0o755)
    return venv


@pytest.mark.parametrize("imports", [True, False])
def test_the_install_script_keeps_one_build_and_uninstalls_it_again_when_it_does_not_import(tmp_path, imports):
    venv = fake_venv(tmp_path, imports)
    res = subprocess.run(["bash", "-c", mooncake_script(str(venv), NON_CUDA)], capture_output=True, text=True,
                         timeout=30)
    pip = (venv / "pip.log").read_text().splitlines()
    # The CUDA 12 build was there (the fake's `show` says so): out first, then the new one forced back in.
    assert "uninstall -y -q mooncake-transfer-engine" in pip
    assert f"install -q --force-reinstall {NON_CUDA}=={MOONCAKE_PIN}" in pip
    if imports:
        assert res.returncode == 0 and res.stdout.strip() == f"{NON_CUDA} {MOONCAKE_PIN} imports in {venv}"
        assert f"uninstall -y -q {NON_CUDA}" not in pip
    else:
        assert res.returncode == 3 and pip[-1] == f"uninstall -y -q {NON_CUDA}"
        assert "ImportError: libibverbs.so.1: cannot open shared object file" in res.stderr
        assert "libibverbs1 libnuma1 libcurl4" in res.stderr and f"uninstalled {NON_CUDA} again" in res.stderr


# ---- probe -------------------------------------------------------------------------------------------------

def py_env(mooncake) -> PythonEnv:
    line = json.dumps({"python": "3.11.7", "executable": "/v/bin/python", "mooncake": mooncake, "packages": {
        "lmcache": "0.5.6", "nixl": "1.5.1", NON_CUDA: MOONCAKE_PIN if mooncake else None}})
    return parse_python(line)


class Probe:
    def __init__(self, python):
        self.python, self.problems, self.warnings, self.error = python, [], [], None
        self.gpus, self.ports, self.rdma, self.memlock, self.disk, self.model_cache = None, [], [], None, None, None


@pytest.mark.parametrize("mooncake, says", [
    ("ok", None), (None, "no Mooncake wheel is installed in /v/bin/python"),
    ("ImportError: libcudart.so.12: cannot open shared object file", "does not import in /v/bin/python "
     "(ImportError: libcudart.so.12: cannot open shared object file)")])
def test_probe_refuses_a_mooncake_fleet_whose_venv_cannot_import_it_and_names_the_fix(mooncake, says):
    fl = parse_fleet(mooncake_data())
    p = Probe(py_env(mooncake))
    assess_node(fl, fl.nodes[0], p)
    assert needs_mooncake(fl, p) == (mooncake != "ok")
    if says is None:
        assert p.problems == []
    else:
        [v] = p.problems
        msg = v.line()
        assert v.id == "mooncake_broken" and says in msg and "make setup-mooncake" in msg
        assert "p2pctl probe --bootstrap" in msg
    nixl = parse_fleet(local_fleet(2, name="n"))
    p = Probe(py_env(mooncake))
    assess_node(nixl, nixl.nodes[0], p)
    assert p.problems == [] and not needs_mooncake(nixl, p)


def test_the_probe_script_reports_the_build_and_whether_it_imports():
    from p2p_ops.facts.python_env import python_env_fact
    import sys

    fact = python_env_fact(sys.executable)
    got = fact.parse(subprocess.run(fact.shell, shell=True, capture_output=True, text=True, timeout=120).stdout)
    assert NON_CUDA in got.packages
    assert got.mooncake in (None, "ok") or got.mooncake.startswith(("ImportError", "OSError"))


# ---- doctor ------------------------------------------------------------------------------------------------

def test_doctor_names_a_node_whose_mooncake_does_not_import():
    bad = "transfer_engine is mooncake_te but Mooncake does not import in /v/bin/python (ImportError: x)"
    facts = fleet([inst("node-a-0"), inst("node-b-0")], transfer_engine="mooncake_te",
                  nodes=[node("node-a"), node("node-b", mooncake=bad, packages={NON_CUDA: MOONCAKE_PIN})])
    [f] = problems(D.check(facts), "mooncake")
    assert (f.subject, f.value, f.message) == ("node-b", MOONCAKE_PIN, bad) and "make setup-mooncake" in f.fix


def test_one_server_restarted_on_the_other_engine_is_the_odd_one_out_with_the_one_node_fix():
    mc = {"mp": {"p2p_config": {"transfer_engine": "mooncake_te"}}}
    peers = [inst(f"node-{x}-0", proc_env=env(LMCACHE_P2P_TRANSFER_ENGINE="mooncake_te",
                                              LMCACHE_P2P_ADVERTISE_URL=url(x)),
                  spec_env=spec(LMCACHE_P2P_TRANSFER_ENGINE="mooncake_te", LMCACHE_P2P_ADVERTISE_URL=url(x)))
             for x in "ab"]
    for p in peers:
        p.config = mc
    # node-c-0's env.sh was edited back to nixl and its server restarted from it.
    odd = inst("node-c-0", status=dict(STATUS), proc_env=env(LMCACHE_P2P_ADVERTISE_URL=url("c")),
               spec_env=spec(LMCACHE_P2P_TRANSFER_ENGINE="mooncake_te", LMCACHE_P2P_ADVERTISE_URL=url("c")))
    [f] = problems(D.check(fleet([*peers, odd], transfer_engine="mooncake_te")), "agree:transfer_engine")
    assert f.subject == "node-c-0"
    assert "node-c-0 is the odd one out (node-a-0, node-b-0 use mooncake_te)" in f.message
    assert f.cause.id == "transfer_engine_differs"
    assert f.fix.endswith("(transfer_engine=mooncake_te) and every server that logged 'Object missing required "
                          "field': p2pctl down --node node-c --role server && p2pctl up --node node-c --role server")


# ---- bundle ------------------------------------------------------------------------------------------------

MOONCAKE_LOG = ("E1202 00:41:54.558046 10668 transfer_metadata.cpp:1098] Local segment descriptor not found\n"
                "E1202 00:43:10.000001 10668 rdma_transport.cpp:1139] RdmaTransport: No available RNIC\n")


def test_a_bundle_carries_the_mooncake_environment_and_log_lines(tmp_path, p2pctl):
    from p2p_ops.lifecycle import launch
    from p2p_ops.lifecycle.context import FleetContext
    from tests.unit.test_bundle import unpack
    import yaml

    data = mooncake_data(mooncake_protocol="rdma", mooncake_device="mlx5_0")
    (tmp_path / "fleet.yaml").write_text(yaml.safe_dump(data))
    ctx = FleetContext.load(tmp_path / "fleet.yaml")
    launch.render(ctx)
    ctx.layout.log("node-b-0", "server").write_text(MOONCAKE_LOG)
    out = tmp_path / "b.tar.gz"
    code, _, err = p2pctl("bundle", "-f", str(ctx.fleet_file), "-o", str(out), "--json")
    assert code in (0, 1), err
    root, _ = unpack(out, tmp_path / "x")
    env_b = (root / "nodes/node-b/node-b-0/env.sh").read_text()
    assert "export MC_TE_PROTOCOL=rdma" in env_b and "export MC_TE_DEVICE=mlx5_0" in env_b
    assert "export LMCACHE_P2P_TRANSFER_ENGINE=mooncake_te" in env_b
    assert (root / "nodes/node-b/node-b-0/server.log").read_text() == MOONCAKE_LOG
    pkgs = json.loads((root / "nodes/node-a/packages.json").read_text())
    assert NON_CUDA in pkgs["packages"]



def test_up_refuses_to_start_a_mooncake_fleet_whose_venv_cannot_import_it(tmp_path):
    """`up`'s preflight reads each node's interpreter (here a fake venv answering like a CPU node holding the
    CUDA 12 build) and stops before anything starts, naming the node, the import error and the fix."""
    from p2p_ops.errors import CouldNotRun
    from p2p_ops.lifecycle.context import FleetContext
    from p2p_ops.lifecycle.preflight.probe import preflight
    import yaml

    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    answer = json.dumps({"python": "3.11.7", "executable": f"{venv}/bin/python", "packages": {
        MOONCAKE_WHEELS["cuda12"]: MOONCAKE_PIN}, "mooncake": "ImportError: libcudart.so.12: cannot open shared "
                                                              "object file: No such file or directory"})
    (venv / "bin" / "python").write_text(f"#!/bin/bash\ncat >/dev/null\necho '{answer}'\n")
    (venv / "bin" / "python").chmod(0o755)
    data = mooncake_data()
    data["nodes"][1]["venv"] = str(venv)
    (tmp_path / "fleet.yaml").write_text(yaml.safe_dump(data))
    with FleetContext.load(tmp_path / "fleet.yaml") as ctx, pytest.raises(CouldNotRun) as exc:
        preflight(ctx)
    msg = str(exc.value)
    assert msg.startswith("Mooncake cannot start on every node, so nothing was started:\n- node-b: ")
    assert "ImportError: libcudart.so.12" in msg and "make setup-mooncake" in msg and "node-a" not in msg


def test_bench_transfer_on_mooncake_keeps_the_opt_in_validate_enforces(fakes):
    """`bench transfer --engine mooncake_te` starts Mooncake's wildcard listeners itself: on a nixl fleet that
    never accepted them it refuses before anything starts (the fakes are scripted with no command at all, so any
    command it ran would fail the test). It once skipped the opt-in (issue 44)."""
    from p2p_ops.bench.transfer import run_transfer

    fleet = fakes.fleet(2)
    with pytest.raises(BadInput) as got:
        run_transfer(fleet.ctx, "node-a", "node-b", 1024, engines=("mooncake_te",))
    assert str(got.value).startswith("--engine mooncake_te opens two listeners per Mooncake transfer engine")
    assert "settings.mooncake_listen_any: true" in str(got.value)
