"""The cross-node proof on a real local fleet, and its failure when peers disagree on how they hash."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from p2p_ops.harness.basic import run_basic
from p2p_ops.lifecycle import launch
from p2p_ops.lifecycle.context import FleetContext
from tests.conftest import write_local_fleet

pytestmark = pytest.mark.e2e


def _start_with_edited_env(tmp_path: Path, edit: dict[str, str], **overrides) -> FleetContext:
    """Render from a valid spec, then hand-edit node-b-0's env.sh: what the spec check would have refused."""
    ctx = FleetContext.load(write_local_fleet(tmp_path / "fleet.yaml", 2, name="mismatch", **overrides))
    launch.render(ctx)
    env = ctx.layout.env("node-b-0")
    text = env.read_text()
    for key, value in edit.items():
        text, n = re.subn(rf"^export {key}=.*$", f"export {key}={value}", text, flags=re.M)
        assert n == 1, key
    env.write_text(text)
    launch.up(ctx, rerender=False)
    launch.wait(ctx, timeout=90)
    return ctx


# The PYTHONHASHSEED case (builtin hash) runs on the fleet of tests/e2e/test_diagnose.py, which also checks
# that the cross-node proof names it; PYTHONHASHSEED only changes keys when the hash depends on it.
@pytest.mark.parametrize("edit,settings,cause", [
    ({"LMCACHE_CHUNK_SIZE": "512"}, {}, "chunk_size_differs"),
], ids=["chunk-size"])
def test_peers_that_hash_differently_share_nothing_and_fail_names_why(tmp_path, edit, settings, cause):
    from p2p_ops.spec.settings import Settings

    overrides = {}
    if settings:
        overrides["settings"] = {**Settings(server_nice=10).model_dump(), **settings}
    ctx = None
    try:
        ctx = _start_with_edited_env(tmp_path, edit, **overrides)
        result = run_basic(ctx)
        assert not result.passed
        assert result.numbers["cached_tokens_b"] == 0
        assert result.numbers["p2p_loads_b"] == 0
        assert result.cause is not None and result.cause.id == cause, (result.cause, result.likely_cause)
        assert "chunk_size" in result.likely_cause, result.likely_cause
    finally:
        if ctx is None:
            ctx = FleetContext.load(tmp_path / "fleet.yaml")
        launch.down(ctx)
