"""Shared test helpers: a fleet spec on free loopback ports (p2p_ops.lifecycle.free_ports), tool venvs, and the
p2pctl entry point."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

# LMCache must never phone home from a test run.
os.environ.setdefault("LMCACHE_TRACK_USAGE", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("LMCACHE_DISABLE_BANNER", "1")
os.environ.setdefault("PYTHONWARNINGS", "ignore")


def pid_alive(pid: int) -> bool:
    """The process exists and is not a zombie (an unreaped child still answers kill -0)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def tool_venv(env_var: str, default: str) -> Path:
    """A tool's own venv (vLLM, vllm-router): $env_var (relative: from the working directory), else the checkout's
    `default`; absolute, since engines and routers start in their run folders."""
    from p2p_ops.resources import env_path

    return env_path(env_var, REPO / default)


def skip_tier_without(venv: Path, stamp: str, require_var: str, make_target: str, tier_dir: Path, items) -> None:
    """Skip a tier's tests when its venv was never set up (naming the make target), or fail the run when
    `require_var`=1 (CI), where a missing environment must not pass as a skip."""
    if (venv / stamp).is_file():
        return
    if os.environ.get(require_var) == "1":
        raise pytest.UsageError(f"{require_var}=1 but {venv} is not set up: run `make {make_target}`")
    skip = pytest.mark.skip(reason=f"no environment at {venv}: run `make {make_target}`")
    for item in items:
        if tier_dir in Path(item.fspath).parents:
            item.add_marker(skip)


def require_mooncake() -> None:
    """Skip a mooncake_te test when this venv's Mooncake does not import (naming the make target), or fail it when
    P2P_REQUIRE_MOONCAKE=1 (CI), where a missing engine must not pass as a skip."""
    import subprocess

    from p2p_ops.facts.python_env import python_env_fact

    fact = python_env_fact(sys.executable)
    got = fact.parse(subprocess.run(fact.shell, shell=True, capture_output=True, text=True, timeout=120).stdout)
    if got.mooncake == "ok":
        return
    why = f"Mooncake does not import in {sys.executable} ({got.mooncake or 'not installed'}): run `make setup-mooncake`"
    if os.environ.get("P2P_REQUIRE_MOONCAKE") == "1":
        pytest.fail(f"P2P_REQUIRE_MOONCAKE=1 but {why}")
    pytest.skip(why)


def mooncake_settings(**more) -> dict:
    """The starter fleet's settings on Mooncake's transfer engine, its wildcard listeners accepted."""
    from p2p_ops.spec.starter import local_fleet

    return local_fleet(1)["settings"] | {"transfer_engine": "mooncake_te", "mooncake_listen_any": True, **more}


def free_base(n_nodes: int, router: bool = False) -> dict:
    """The first free port plan for `n_nodes`, searched from this xdist worker's own share of the offsets: two
    workers that look at the same moment never pick one plan (the unit tier runs on two)."""
    from p2p_ops.errors import BadInput
    from p2p_ops.lifecycle.free_ports import OFFSET_LIMIT, OFFSET_STEP, choose

    worker, count = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0")[2:]), int(os.environ.get(
        "PYTEST_XDIST_WORKER_COUNT", "1"))
    offsets = list(range(0, OFFSET_LIMIT, OFFSET_STEP))
    share = len(offsets) // max(count, 1)
    for off in offsets[worker * share:] + offsets[:worker * share]:
        try:
            return choose(n_nodes, offset=off, router=router).base
        except BadInput:
            continue
    return choose(n_nodes, router=router).base    # none free: choose() says so in one line


def write_local_fleet(path: Path, n_nodes: int = 2, name: str = "t", **overrides) -> Path:
    from p2p_ops.lifecycle.free_ports import planned_ports, port_free
    from p2p_ops.spec.starter import local_fleet

    base = free_base(n_nodes)
    data = local_fleet(n_nodes, name=name, base=base)
    # Each test fleet's Prometheus on a port nothing holds now (one left behind by another test cannot answer for
    # it), counted up from the starter's, outside the kernel's ephemeral range a client socket may take meanwhile.
    prom, fleet_ports = data.get("prometheus", {}).get("port", 9390), set(planned_ports(base, n_nodes))
    while prom in fleet_ports or not port_free(prom):
        prom += 1
    data["prometheus"] = {"port": prom}
    for key, value in overrides.items():
        data[key] = value
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture
def p2pctl(capsys):
    """Run the CLI in-process; returns (exit code, stdout, stderr)."""
    from p2p_ops.cli import main

    def run(*argv: str) -> tuple[int, str, str]:
        code = main(list(argv))
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


@pytest.fixture
def fakes(tmp_path):
    """Scripted fake connectors and fleets reached through them (tests/support/fake_connector.py); on teardown
    every fake must have run all its declared commands and no undeclared one."""
    from tests.support.fake_connector import Fakes

    made = Fakes(tmp_path)
    yield made
    made.verify()
