"""Where a check reads a host from: the live machine, or a captured snapshot tree that mirrors the parts of `/`
the checks read (sys/, dev/, proc/) plus recorded tool outputs (tools/<fact name>.txt), so the same check runs on
fixture trees in tests and on a bundle collected from a real node.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from p2p_ops import files
from p2p_ops.errors import BadInput
from p2p_ops.facts import recorded_runner
from p2p_ops.facts.base import Runner, run_local


@dataclass
class HostView:
    sysfs: Path = Path("/sys")
    dev: Path = Path("/dev")
    proc: Path = Path("/proc")
    runner: Runner = field(default=run_local)
    live: bool = True

    @classmethod
    def local(cls, sysfs_root: str | Path | None = None) -> HostView:
        """This machine; `sysfs_root` replaces `/sys` only (tools and /proc stay live). A copy of /sys is vetted
        like a snapshot (`check_copy`)."""
        sysfs = Path(sysfs_root) if sysfs_root else Path("/sys")
        check_copy(sysfs, "--sysfs-root", "point it at a copy of /sys")
        return cls(sysfs=sysfs)

    @classmethod
    def snapshot(cls, root: str | Path) -> HostView:
        root = Path(root)
        check_copy(root, "--root", "it should hold sys/, dev/, proc/ and tools/")
        return cls(root / "sys", root / "dev", root / "proc", recorded_runner(root / "tools"), live=False)


def check_copy(root: Path, flag: str, hint: str) -> None:
    """A folder standing in for part of a host must be one, and hold nothing that leads out of it or blocks a
    read (`files.check_tree`: links out, FIFOs, devices outside dev/, loops). The live /sys is what it is."""
    if not root.is_dir():
        raise BadInput(f"{flag} {root} is not a directory; {hint}")
    if os.path.realpath(root) != "/sys":
        files.check_tree(root)
