"""What `up --dry-run` plans with --node / --role / --no-render (what `up` itself says: test_launch_ops.py)."""

from __future__ import annotations

import pytest

from p2p_ops.errors import CouldNotRun
from p2p_ops.lifecycle import dryrun, launch
from p2p_ops.lifecycle.context import FleetContext
from tests.conftest import write_local_fleet


@pytest.fixture
def ctx(tmp_path):
    c = FleetContext.load(write_local_fleet(tmp_path / "fleet.yaml", 2, name="plan"))
    yield c
    c.close()


def test_dry_run_honours_node_and_role(ctx):
    steps = dryrun.plan(ctx, only="node-b", roles=("server",))
    assert list(steps) == ["node-b"]
    text = "\n".join(steps["node-b"])
    assert "node-b-0/server" in text and "node-b-0/engine" not in text and "coordinator:" not in text


def test_dry_run_no_render_uses_the_files_on_disk(ctx):
    with pytest.raises(CouldNotRun, match="p2pctl render"):
        dryrun.plan(ctx, rerender=False)
    launch.render(ctx)
    env = ctx.layout.dir("node-a-0") / "env.sh"
    env.write_text(env.read_text().replace("export LMCACHE_P2P_LOAD_TIMEOUT=30.0", "export LMCACHE_P2P_LOAD_TIMEOUT=99"))
    edited = "\n".join(dryrun.plan(ctx, only="node-a", rerender=False)["node-a"])
    assert "use      " in edited and "differs  node-a-0/env.sh on disk is NOT what p2pctl renders" in edited
    assert "-export LMCACHE_P2P_LOAD_TIMEOUT=30.0" in edited and "+export LMCACHE_P2P_LOAD_TIMEOUT=99" in edited
    assert "--p2p-load-timeout 30.0" in edited  # the exec line is what fleet.yaml renders, the edit is the diff
    fresh = "\n".join(dryrun.plan(ctx, only="node-a")["node-a"])
    assert "--p2p-load-timeout 30.0" in fresh
