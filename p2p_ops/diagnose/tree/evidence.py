"""What the tree's checks read: an `Evidence` gathers the fleet's doctor facts, logs and metrics once, lazily."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from p2p_ops import causes
from p2p_ops.causes import Verdict
from p2p_ops.connectors import LocalConnector
from p2p_ops.diagnose.doctor import run
from p2p_ops.diagnose.doctor.agreement import restart
from p2p_ops.diagnose.tree.model import Tree
from p2p_ops.endpoints import metrics_api
from p2p_ops.facts.logs import log_grep_fact
from p2p_ops.facts.sections import read_fact
from p2p_ops.lifecycle.context import FleetContext
from p2p_ops.spec.units import LAUNCHED_ROLES

LOG_MATCH_LIMIT = 5000


@dataclass
class Observation:
    check: str
    status: str               # problem | info | ok | n/a (not applicable to this fleet, with why) | unknown
    subject: str
    detail: str
    cause: Optional[Verdict] = None     # what a problem's evidence confirms (the catalogue's verdict)
    error: bool = True                  # False: a warning (it ranks after an error of the same cause rank)

    def __post_init__(self) -> None:
        if self.status == "problem" and self.cause is None:
            raise ValueError(f"{self.check} {self.subject}: a problem names its cause")

    @property
    def fix(self) -> str:
        return self.cause.fix if self.cause else ""


class Evidence:
    """Everything the checks read, gathered at most once per run. `ctx` may be None (only --log files)."""

    def __init__(self, ctx: FleetContext, tree: Tree, extra_logs: tuple[Path, ...] = (), reach: bool = True):
        self.ctx, self.tree, self.extra_logs, self.reach = ctx, tree, tuple(extra_logs), reach
        self._doctor = None
        self._logs: Optional[list[tuple[str, str, str, list[str]]]] = None
        self._metrics: dict[str, list] = {}

    def doctor(self):
        if self._doctor is None and self.ctx is not None:
            self._doctor = run(self.ctx, reach=self.reach)
        return self._doctor

    @property
    def facts(self):
        got = self.doctor()
        return got[0] if got else None

    def restart(self, instance: str, role: str = "server") -> str:
        """The commands that restart one unit of an instance, for a fix that names them."""
        return restart(self.facts, [instance], role) if self.facts is not None else causes.restart(("<node>", role))

    def running_servers(self) -> list[tuple]:
        if self.facts is None:
            return []
        running = {i.instance for i in self.facts.instances if i.running}
        return [(n, i, self.ctx.server_url(n, i)) for n, i in self.ctx.fleet.instances() if i.id in running]

    def metrics(self, url: str) -> list:
        if url not in self._metrics:
            self._metrics[url] = metrics_api.scrape(url)
        return self._metrics[url]

    def logs(self) -> list[tuple[str, str, str, list[str]]]:
        """(label, role, node, matching lines) per log: one grep per log for the union of the fleet-log
        signatures."""
        if self._logs is None:
            patterns = [s.pattern for s in self.tree.signatures.values() if s.logs]
            units = self.ctx.units(roles=LAUNCHED_ROLES) if self.ctx is not None else []
            where = [(f"{u.folder}/{u.role}.log", u.role, u.node.name if u.node else "", self.ctx.conn(u.node),
                      self.ctx.proc(u).log) for u in units]
            where += [(str(p), "any", "", LocalConnector(), str(p)) for p in self.extra_logs]
            self._logs = [(label, role, node, read_fact(conn, log_grep_fact(path, patterns, LOG_MATCH_LIMIT),
                                                        timeout=30)) for label, role, node, conn, path in where]
        return self._logs
