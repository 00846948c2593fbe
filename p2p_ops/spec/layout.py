"""Where a fleet's state lives: one run folder next to the fleet file, one sub-folder per instance.

`<run>/coordinator/` and `<run>/<instance-id>/` each hold env.sh, the start wrappers, logs and pidfiles,
so `status` and `down` work from any later shell.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

# The folders of the fleet's singletons (instances' folders are their ids, which may be none of these).
COORDINATOR = "coordinator"
ROUTER = "router"
PROMETHEUS = "prometheus"
TESTS = "tests"
BUNDLES = "bundles"
BASELINES = "baselines"
RESERVED_FOLDERS = (COORDINATOR, ROUTER, PROMETHEUS, TESTS, BUNDLES, BASELINES)


@dataclass(frozen=True)
class RunLayout:
    root: Path

    @classmethod
    def for_fleet(cls, fleet_file: Path, fleet_name: str, run_dir: Optional[str] = None) -> "RunLayout":
        if run_dir:  # not resolved: a link named here must reach `files.private_dir`, which refuses it
            return cls(Path(os.path.abspath(run_dir)))
        return cls((fleet_file.resolve().parent / "p2p-run" / fleet_name))

    def dir(self, unit: str) -> Path:
        return self.root / unit

    def env(self, unit: str) -> Path:
        return self.dir(unit) / "env.sh"

    def wrapper(self, unit: str, role: str) -> Path:
        return self.dir(unit) / f"start_{role}.sh"

    def log(self, unit: str, role: str) -> Path:
        return self.dir(unit) / f"{role}.log"

    def pidfile(self, unit: str, role: str) -> Path:
        return self.dir(unit) / f"{role}.pid"

    @property
    def tests(self) -> Path:
        return self.root / TESTS
