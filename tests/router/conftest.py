"""A local fleet with a real vllm-router in front (from `make setup-router`'s .venv-router).

Without .venv-router the tier is skipped with the command that makes it, unless P2P_REQUIRE_ROUTER=1 (CI),
where a missing router environment is a failure.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest
import yaml

from p2p_ops import launch
from p2p_ops.bench.placement import port_plan
from p2p_ops.fleet import local_fleet
from tests.conftest import REPO

ROUTER_VENV = Path(os.environ.get("P2P_ROUTER_VENV", REPO / ".venv-router"))


def pytest_collection_modifyitems(config, items):
    if (ROUTER_VENV / ".p2p-router-setup-done").is_file():
        return
    if os.environ.get("P2P_REQUIRE_ROUTER") == "1":
        raise pytest.UsageError(f"P2P_REQUIRE_ROUTER=1 but {ROUTER_VENV} is not set up: run `make setup-router`")
    here = Path(__file__).parent
    skip = pytest.mark.skip(reason=f"no router environment at {ROUTER_VENV}: run `make setup-router`")
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(skip)


def write_router_fleet(path: Path, policy: str, name: str = "rt") -> Path:
    ports = port_plan(2)
    data = local_fleet(2, name=name, base=ports)
    data["router"] = {"enabled": True, "policy": policy, "port": ports["router"],
                      "prometheus_port": ports["router"] + 1, "kv_events_port_base": ports["router"] + 2,
                      "venv": str(ROUTER_VENV)}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@contextlib.contextmanager
def running_router_fleet(tmp: Path, policy: str, name: str = "rt"):
    ctx = launch.FleetContext.load(write_router_fleet(tmp / "fleet.yaml", policy, name))
    try:
        launch.up(ctx)
        launch.wait(ctx, timeout=120)
        yield ctx
    finally:
        launch.down(ctx)
        ctx.close()
