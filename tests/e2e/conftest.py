"""A real local fleet (coordinator, servers, CPU engines on loopback) for end-to-end tests."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from p2p_ops.lifecycle import launch
from p2p_ops.lifecycle.context import FleetContext
from tests.conftest import write_local_fleet


@contextlib.contextmanager
def running_fleet(tmp: Path, n_nodes: int = 2, name: str = "e2e", **overrides):
    """Up + wait, yield the FleetContext, and always down (also when up or a test fails)."""
    fleet_file = write_local_fleet(tmp / "fleet.yaml", n_nodes, name=name, **overrides)
    with FleetContext.load(fleet_file) as ctx, launch.running(ctx, timeout=90):
        yield ctx


@pytest.fixture(scope="module")
def fleet2(tmp_path_factory):
    """A healthy 2-node fleet shared by one module's tests (module scope: an idle fleet's servers still burn
    CPU in NIXL's progress threads, so it must not outlive the module that uses it)."""
    with running_fleet(tmp_path_factory.mktemp("fleet2")) as ctx:
        yield ctx


@pytest.fixture(scope="module")
def disposable_fleet2(tmp_path_factory):
    """A 2-node fleet a test may break (kill an engine)."""
    with running_fleet(tmp_path_factory.mktemp("disposable"), name="disposable") as ctx:
        yield ctx
