"""What a fault is (`Fault`: inject, hold, restore, cleanup) and the simplest one, `Kill`: SIGKILL to a unit's
process group, started again on restore. The scenarios (scenarios.py, routed.py) build on these."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from p2p_ops.errors import BadInput
from p2p_ops.harness.faults.core import FaultOptions, Load, Progress
from p2p_ops.observe.records import RequestRecord
from p2p_ops.lifecycle import procs
from p2p_ops.lifecycle.context import FleetContext


@dataclass
class Fault:
    part: str
    unreachable_url: str = ""        # an engine no request can reach while the part is broken
    why_unreachable: str = ""
    restarted: bool = False          # restore() started a process again (re-registration time is a figure)
    extra: dict = field(default_factory=dict)

    def inject(self, load: Load, progress: Progress) -> None: ...

    def hold(self, load: Load, opts: FaultOptions, progress: Progress) -> None:
        time.sleep(opts.hold_s)

    def restore(self, progress: Progress) -> None: ...

    def cleanup(self) -> None:
        """Whatever happens (also an exception): leave nothing broken."""

    def finish(self, marks: dict[str, float], samples: list[RequestRecord]) -> None:
        """After the run: the scenario's own figures into `extra` (marks: fault, restart, recovered times)."""


def inst_a(ctx: FleetContext):
    """(node, instance) of the fleet's first instance: A, which warms the shared documents."""
    return ctx.fleet.instances()[0]


def inst_b(ctx: FleetContext):
    """(node, instance) of the second instance: B, the one the node faults hit."""
    return ctx.fleet.instances()[1]


class Kill(Fault):
    def __init__(self, ctx: FleetContext, node, proc: procs.Proc, dead_engine: str = "") -> None:
        super().__init__(proc.name, dead_engine, "its engine was dead" if dead_engine else "", restarted=True)
        self.ctx, self.node, self.proc = ctx, node, proc

    def inject(self, load, progress) -> None:
        [st] = procs.states(self.ctx.conn(self.node), [self.proc])
        if not st.running or st.pid is None:
            raise BadInput(f"{self.proc.name} is {st.state}, not running: start the fleet (`p2pctl up`) "
                           "before a fault test")
        progress(f"killing {self.proc.name}")
        self.ctx.conn(self.node).run(f"kill -KILL -- -{int(st.pid)} 2>/dev/null || kill -KILL {int(st.pid)}",
                                     timeout=15)

    def restore(self, progress) -> None:
        progress(f"starting {self.proc.name} again")
        procs.start(self.ctx.conn(self.node), self.proc)
