"""A local fleet with a real vllm-router in front (from `make setup-router`'s .venv-router).

One router fleet serves the whole tier: each test switches the router to the policy it needs
(`bench.placement.switch_policy` restarts only the router; engines and caches stay), as `bench placement` does.
Without .venv-router the tier is skipped with the command that makes it, unless P2P_REQUIRE_ROUTER=1 (CI),
where a missing router environment is a failure.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
import yaml

from p2p_ops.bench.placement import switch_policy
from p2p_ops.lifecycle import launch
from p2p_ops.lifecycle.context import FleetContext
from p2p_ops.lifecycle.free_ports import choose, router_ports
from p2p_ops.spec.starter import local_fleet
from tests.conftest import skip_tier_without, tool_venv

ROUTER_VENV = tool_venv("P2P_ROUTER_VENV", ".venv-router")


def pytest_collection_modifyitems(config, items):
    skip_tier_without(ROUTER_VENV, ".p2p-router-setup-done", "P2P_REQUIRE_ROUTER", "setup-router",
                      Path(__file__).parent, items)


def write_router_fleet(path: Path, policy: str, name: str = "rt") -> Path:
    ports = choose(2, router=True).base
    data = local_fleet(2, name=name, base=ports)
    data["router"] = {"enabled": True, "policy": policy, **router_ports(ports), "venv": str(ROUTER_VENV)}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@contextlib.contextmanager
def running_router_fleet(tmp: Path, policy: str, name: str = "rt"):
    with FleetContext.load(write_router_fleet(tmp / "fleet.yaml", policy, name)) as ctx, \
            launch.running(ctx, timeout=120):
        yield ctx


@pytest.fixture(scope="session")
def router_fleet(tmp_path_factory):
    """The tier's one router fleet, started under cache_aware; `use(policy)` switches the router."""
    with running_router_fleet(tmp_path_factory.mktemp("router"), "cache_aware") as ctx:
        yield ctx


@pytest.fixture
def use_policy(router_fleet):
    """Switch the router to `policy` once the fleet is ready again: a test before may have restarted an engine or
    a server, whose peers must see it again before a pull can be expected."""
    def use(policy: str):
        launch.wait(router_fleet, timeout=120)
        switch_policy(router_fleet, yaml.safe_load(router_fleet.fleet_file.read_text()), policy)
        return router_fleet
    return use
