"""A local fleet with a real vllm-router in front (from `make setup-router`'s .venv-router).

Without .venv-router the tier is skipped with the command that makes it, unless P2P_REQUIRE_ROUTER=1 (CI),
where a missing router environment is a failure.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import yaml

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
