"""`launch.temporary`, the one launcher of a fleet for one run (demo, calibrate, peers, placement, the suite): a
fleet that fails to start is still taken down, its folder kept as evidence when asked for, else removed."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from p2p_ops.errors import CouldNotRun
from p2p_ops.lifecycle import launch
from p2p_ops.lifecycle.free_ports import choose
from p2p_ops.lifecycle.lock import LAST_DOWN
from p2p_ops.spec.starter import local_fleet


def broken_fleet(name: str) -> dict:
    """A one-node fleet whose venv does not exist: every process exits at once (no port is ever held)."""
    data = local_fleet(1, name=name, base=choose(1).base)
    data["nodes"][0]["venv"] = "/nonexistent/venv"
    return data


def test_a_fleet_that_fails_to_start_is_taken_down_and_its_folder_kept(tmp_path):
    where = tmp_path / "kept"
    with pytest.raises(CouldNotRun, match="failed to start"):
        with launch.temporary(broken_fleet("broken"), where):
            pytest.fail("the block must not run on a fleet that did not start")
    assert (where / LAST_DOWN).is_file()  # down ran
    assert (where / "fleet.yaml").is_file() and "nonexistent" in (where / "coordinator" / "coordinator.log").read_text()


def test_without_a_folder_the_temporary_one_is_removed():
    name = f"gone{os.getpid()}"
    with pytest.raises(CouldNotRun):
        with launch.temporary(broken_fleet(name)):
            pass
    assert not list(Path(tempfile.gettempdir()).glob(f"{name}-*"))
