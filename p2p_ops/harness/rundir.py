"""Every test run leaves evidence in its own folder: <run>/tests/<UTC time>-<kind>/.

Its `run.json` says whether the run is still writing (`running`), finished (`complete`) or was cut short
(`interrupted`, with the reason): a `p2pctl down` of the fleet while the test ran (lifecycle.lock records every
`down`), or Ctrl-C. An interrupted run still gets its report from what it wrote, marked so.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import socket
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

from p2p_ops import files
from p2p_ops.errors import BadInput
from p2p_ops.lifecycle.lock import last_down
from p2p_ops.spec.layout import COORDINATOR, TESTS, RunLayout

RUN_FILE = "run.json"


def new_run_dir(layout: RunLayout, kind: str) -> Path:
    """A fresh folder of its own (0700, as are tests/ and env/), holding copies of the fleet's env.sh files."""
    base = files.private_dir(layout.tests) / f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{kind}"
    for n in itertools.count(1):
        path = base if n == 1 else base.with_name(f"{base.name}-{n}")
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, 0o700)  # exclusive: two runs started in the same second get a folder each
            break
    copy_env_files(layout, files.private_dir(path))
    return path


def copy_env_files(layout: RunLayout, run: Path) -> None:
    """The env.sh files the fleet ran with, next to the results they produced (0600: they may hold an API key).
    One that is a link, or is linked out of the run folder, is skipped, its reason written in its place."""
    for env in sorted(layout.root.glob("*/env.sh")):
        unit = env.parent.name
        if unit == TESTS:
            continue
        try:
            text = files.read_text(env, 1 << 20, follow=False, within=layout.root)
        except files.Refused as exc:
            text = f"# not copied: {exc}\n"
        name = "coordinator.env.sh" if unit == COORDINATOR else f"{unit}.env.sh"
        files.write_text(files.private_dir(run / "env") / name, text)


def run_state(path: Path) -> dict:
    """The run's run.json ({} for folders written before it existed, or one that is no file of its own or no
    object)."""
    try:
        doc = files.read_json(path / RUN_FILE, 1 << 20, within=path)
    except BadInput:
        return {}
    return doc if isinstance(doc, dict) else {}


@dataclass
class RunFolder:
    path: Path
    layout: RunLayout

    def interrupted(self) -> Optional[str]:
        """Why the run is cut short (a `down` of the fleet since it started), or None. Cheap: one file read,
        so long runs check it between steps and stop early."""
        started = float(run_state(self.path).get("started") or 0)
        found = last_down(self.layout.root)
        if found is None or found[0].since <= started:
            return None
        holder, what = found
        return f"{what} was stopped by {holder.describe()} while the test ran"

    def finish(self, reason: str = "") -> None:
        """Write the final state: interrupted (by a `down` seen meanwhile, or `reason`) or complete. A `down` comes
        first: the error a test stopped on is then most likely its consequence."""
        down = self.interrupted()
        reason = (down + (f"; then {reason}" if reason else "")) if down else reason
        files.write_json(self.path / RUN_FILE, dict(run_state(self.path), state="interrupted" if reason else "complete",
                                                    ended=time.time(), reason=reason))


@contextmanager
def run_folder(layout: RunLayout, kind: str) -> Iterator[RunFolder]:
    """A new run folder for the block; its run.json ends complete or interrupted, whatever happens inside."""
    run = RunFolder(new_run_dir(layout, kind), layout)
    files.write_json(run.path / RUN_FILE, {"kind": kind, "state": "running", "pid": os.getpid(),
                                           "host": socket.gethostname(), "started": time.time(), "ended": None,
                                           "reason": ""})
    try:
        yield run
    except KeyboardInterrupt:
        run.finish("stopped by the user (SIGINT) while the test ran")
        raise
    except BaseException as exc:
        run.finish(f"the test stopped on an error: {type(exc).__name__}: {str(exc)[:300]}")
        raise
    run.finish()
