"""Every test run leaves evidence in its own folder: <run>/tests/<UTC time>-<kind>/."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from p2p_ops.spec.layout import COORDINATOR, TESTS, RunLayout


def new_run_dir(layout: RunLayout, kind: str) -> Path:
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    base = layout.tests / f"{stamp}-{kind}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    path.mkdir(parents=True)
    copy_env_files(layout, path / "env")
    return path


def copy_env_files(layout: RunLayout, dest: Path) -> None:
    """The env.sh files the fleet ran with, next to the results they produced."""
    if not layout.root.is_dir():
        return
    for env in sorted(layout.root.glob("*/env.sh")):
        unit = env.parent.name
        if unit == TESTS:
            continue
        target = dest / ("coordinator.env.sh" if unit == COORDINATOR else f"{unit}.env.sh")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(env, target)
