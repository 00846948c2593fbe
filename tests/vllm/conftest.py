"""A real vLLM fleet: vLLM's CPU build (from `make setup-vllm`'s .venv-vllm) with the LMCacheMPConnector, each
talking to its own real `lmcache server` (from the project's .venv), serving a tiny model made on the spot.

Without .venv-vllm the tier is skipped with the command that makes it, unless P2P_REQUIRE_VLLM=1 (CI), where a
missing vLLM environment is a failure.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest
import yaml

from p2p_ops.lifecycle import launch
from p2p_ops.lifecycle.context import FleetContext
from p2p_ops.lifecycle.free_ports import choose
from p2p_ops.spec.starter import local_fleet
from tests.conftest import skip_tier_without, tool_venv

VLLM_VENV = tool_venv("P2P_VLLM_VENV", ".venv-vllm")
VLLM_PYTHON = VLLM_VENV / "bin" / "python"
# vLLM needs 25-90 s to become healthy on an idle 2-core box; a busy CI box takes longer.
VLLM_UP_TIMEOUT = 600.0


def pytest_collection_modifyitems(config, items):
    skip_tier_without(VLLM_VENV, ".p2p-vllm-setup-done", "P2P_REQUIRE_VLLM", "setup-vllm", Path(__file__).parent,
                      items)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    from p2p_ops.harness.local_model import make_model

    return make_model(tmp_path_factory.mktemp("models") / "tiny-llama")


def write_vllm_fleet(path: Path, model: Path, n_nodes: int = 2, name: str = "vllm") -> Path:
    data = local_fleet(n_nodes, name=name, base=choose(n_nodes).base, runtime="vllm",
                       vllm={"model_path": str(model), "venv": str(VLLM_VENV)}, cpu_count=os.cpu_count() or 1)
    # Short peer timeouts: a dead peer must not hold a request for the default 30 s. Lookups get 10 s: a
    # lookup once timed out after 5 s on a busy 2-core box running two vLLM engines (stop 37's CI).
    data["settings"].update(p2p_lookup_timeout=10.0, p2p_load_timeout=5.0)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@contextlib.contextmanager
def running_vllm_fleet(tmp: Path, model: Path, name: str = "vllm"):
    ctx = FleetContext.load(write_vllm_fleet(tmp / "fleet.yaml", model, name=name))
    try:
        launch.up(ctx, start_timeout=VLLM_UP_TIMEOUT)
        launch.wait(ctx, timeout=120)
        yield ctx
    finally:
        launch.down(ctx)
        ctx.close()


@pytest.fixture(scope="module")
def vllm_fleet(tmp_path_factory, tiny_model):
    """Two vLLM nodes on loopback, shared by one module and always taken down."""
    with running_vllm_fleet(tmp_path_factory.mktemp("vllm-fleet"), tiny_model) as ctx:
        yield ctx
