"""Node probe (`p2pctl probe`): is each node of a fleet ready to run its part, before anything starts?

The facts (`p2p_ops.facts`: interpreter and packages, GPUs, RDMA devices, listeners, disk, memlock, model cache)
are read per node in one round trip through its connector (`facts.sections.read_node`, so over SSH for remote
nodes); `readiness.py` turns facts plus the fleet's plan into problems (launch would fail or share nothing) and
warnings (it would run, but check this). Probing never changes a node; `bootstrap.py` is the one acting part
(`--bootstrap`). `preflight` is the part `up` checks itself: every node answers, and holds what its servers and
engines start from (vLLM's interpreter and a local model folder, an importable Mooncake); a failure names every
node while nothing runs anywhere.

Add a probe: a fact in `p2p_ops.facts` with a captured-output test, a label in `facts.node_facts` and in
`PROBE`, a field on `NodeProbe`, and a rule in `readiness.py`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Optional

from p2p_ops.causes import Verdict, verdict
from p2p_ops.connectors.base import Result
from p2p_ops.errors import EXIT_BAD_INPUT, EXIT_CHECK_FAILED, EXIT_OK, CouldNotRun
from p2p_ops.facts import node_facts
from p2p_ops.facts.base import CommandFact
from p2p_ops.facts.gpus import Gpu
from p2p_ops.facts.ib_model import IbDevice
from p2p_ops.facts.limits import Memlock
from p2p_ops.facts.listeners import Listener
from p2p_ops.facts.paths import NODE_ANSWERS, paths_fact
from p2p_ops.facts.python_env import PythonEnv, python_env_fact
from p2p_ops.facts.sections import read_fact, read_node
from p2p_ops.facts.storage import Disk, ModelCache
from p2p_ops.lifecycle import procs
from p2p_ops.lifecycle.context import FleetContext
from p2p_ops.lifecycle.nic_plan import InstancePlan, plan_from_reads
from p2p_ops.lifecycle.preflight.readiness import assess_fleet, assess_node, mooncake_problem
from p2p_ops.lifecycle.render import bin_dir_for, vllm_python
from p2p_ops.spec.model import Fleet, Node
from p2p_ops.spec.units import port_plan


# What the probe reads on one node (`facts.node_facts` labels).
PROBE = ("host", "python", "gpus", "rdma", "topo", "listeners", "disk", "memlock", "model")


@dataclass
class PortCheck:
    port: int
    role: str            # e.g. "h1-0 http", "coordinator"
    bind: str
    state: str           # free | this fleet | busy
    holder: str = ""     # who holds it, e.g. "lmcache pid 4121 (h1-0/server)"


@dataclass
class NodeProbe:
    node: str
    address: str
    connection: str
    error: Optional[str] = None          # the node could not be probed at all (unreachable, auth, host key)
    host: dict = field(default_factory=dict)
    python: Optional[PythonEnv] = None
    gpus: Optional[list[Gpu]] = None     # None: no nvidia-smi
    rdma: list[IbDevice] = field(default_factory=list)
    nic_plan: list[InstancePlan] = field(default_factory=list)   # what render pins where the spec does not
    ports: list[PortCheck] = field(default_factory=list)
    disk_path: str = ""
    disk: Optional[Disk] = None
    memlock: Optional[Memlock] = None
    model_cache: Optional[ModelCache] = None
    problems: list[Verdict] = field(default_factory=list)    # each names the catalogue's cause and fix
    warnings: list[Verdict] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.error is None and not self.problems

    @property
    def verdict(self) -> str:
        # ok allows warnings.
        return "unreachable" if self.error else "ok" if self.ok else "problems"

    def to_json(self) -> dict:
        return {**asdict(self), "ok": self.ok, "verdict": self.verdict,
                **{k: [v.to_dict() for v in getattr(self, k)] for k in ("problems", "warnings")}}


def planned_ports(fleet: Fleet, node: Node) -> list[tuple[int, str, str]]:
    return [(p.port, p.role, p.bind) for p in port_plan(fleet) if p.node == node.name]


def check_ports(plan: list[tuple[int, str, str]], listeners: list[Listener],
                ours: dict[int, str]) -> list[PortCheck]:
    """Each planned port: free, held by this fleet's own process (pid in `ours`), or busy."""
    out = []
    for port, role, bind in plan:
        holders = [ln for ln in listeners if ln.port == port and (ln.wildcard or ln.address in (bind, "*"))]
        if not holders:
            out.append(PortCheck(port, role, bind, "free"))
            continue
        h = holders[0]
        who = f"{h.process or 'a process'}{f' pid {h.pid}' if h.pid else ''} on {h.address}"
        if h.pid is not None and h.pid in ours:
            out.append(PortCheck(port, role, bind, "this fleet", f"{who} ({ours[h.pid]})"))
        else:
            out.append(PortCheck(port, role, bind, "busy", who))
    return out


def node_python(node: Node) -> str:
    return f"{bin_dir_for(node)}/python"


def probe_node(ctx: FleetContext, node: Node) -> NodeProbe:
    """Connection failures become `error`, never an exception."""
    lay = ctx.node_layout(node)
    result = NodeProbe(node.name, node.address, node.connection, disk_path=str(lay.root))
    # A local model folder is checked by `up`'s preflight; a hub id must be in the node's HF cache.
    hub_id = ctx.fleet.vllm.model_path or ctx.fleet.model
    model = hub_id if ctx.fleet.runtime == "vllm" and not hub_id.startswith("/") else None
    try:
        conn = ctx.conn(node)
        facts = node_facts(PROBE, node_python(node), str(lay.root), model)
        read = read_node(conn, facts, timeout=90)
        ours = {st.pid: st.name for st in procs.states(conn, ctx.procs(node))
                if st.running and st.pid is not None}
    except Exception as exc:  # noqa: BLE001 - one host's failure is that host's result
        result.error = str(exc)
        return result
    fill(result, facts, read, ctx.fleet, node, ours)
    assess_node(ctx.fleet, node, result)
    return result


def fill(result: NodeProbe, facts: dict[str, CommandFact], read: dict[str, Result], fleet: Fleet, node: Node,
         ours: dict[int, str]) -> None:
    def value(label: str):
        return facts[label].parse(read[label].output)

    result.host = value("host")
    result.python = value("python")
    result.gpus = value("gpus") if read["gpus"].exit_code != -1 else None
    result.rdma = value("rdma")
    result.nic_plan = plan_from_reads([(i.id, i.gpu) for i in node.instances], read)
    result.ports = check_ports(planned_ports(fleet, node), value("listeners"), ours)
    result.disk = value("disk")
    result.memlock = value("memlock")
    result.model_cache = value("model")


def probe_fleet(ctx: FleetContext, only: Optional[str] = None) -> dict[str, NodeProbe]:
    results = ctx.for_each_node(lambda n: probe_node(ctx, n), only)
    probes = {n.name: results[n.name] if isinstance(results[n.name], NodeProbe)
              else NodeProbe(n.name, n.address, n.connection, error=str(results[n.name]))
              for n in ctx.fleet.nodes if n.name in results}
    assess_fleet(ctx.fleet, probes)  # then compare them: versions must agree across peers
    return probes


def fleet_ok(probes: dict[str, NodeProbe]) -> bool:
    return all(p.ok for p in probes.values())


def fleet_exit_code(probes: dict[str, NodeProbe]) -> int:
    if any(p.error for p in probes.values()):
        return EXIT_BAD_INPUT
    return EXIT_OK if fleet_ok(probes) else EXIT_CHECK_FAILED


def preflight(ctx: FleetContext, only: Optional[str] = None) -> None:
    """An unreachable host, a refused key or a bad host key fails the launch with one line per host."""
    results = ctx.for_each_node(lambda n: read_fact(ctx.conn(n), NODE_ANSWERS, timeout=30, check=True), only)
    if errors := [f"- {name}: {res}" for name, res in results.items() if isinstance(res, Exception)]:
        raise CouldNotRun("cannot reach every node, so nothing was started:\n" + "\n".join(errors))
    fleet = ctx.fleet
    for what, missing_on, wanted in (("vLLM", vllm_missing, fleet.runtime == "vllm"),
                                     ("Mooncake", mooncake_missing, fleet.settings.transfer_engine == "mooncake_te")):
        found = ctx.for_each_node(lambda n: missing_on(ctx, n), only) if wanted else {}
        if missing := {name: res for name, res in found.items() if res}:
            raise CouldNotRun(f"{what} cannot start on every node, so nothing was started:\n"
                              + "\n".join(f"- {name}: {res}" for name, res in missing.items()))


def mooncake_missing(ctx: FleetContext, node: Node) -> str:
    py = read_fact(ctx.conn(node), python_env_fact(node_python(node)), timeout=60)
    problem = mooncake_problem(ctx.fleet.settings.transfer_engine, py)
    return verdict("mooncake_broken", node.name, ("probe", problem)).line() if problem else ""


def vllm_missing(ctx: FleetContext, node: Node) -> str:
    """With the fix; empty when nothing is missing."""
    py, model = vllm_python(ctx.fleet, node), ctx.fleet.vllm.model_path
    checks = {py: ("executable", verdict("vllm_missing", node.name, ("probe", f"no vLLM interpreter at {py}")))}
    if model.startswith("/"):
        checks[model + "/config.json"] = ("file", verdict("model_missing", node.name, (
            "probe", f"no model at {model} (no config.json)"), path=model))
    found = read_fact(ctx.conn(node), paths_fact({p: kind for p, (kind, _) in checks.items()}), timeout=30)
    return next((why.line() for p, (_, why) in checks.items() if not found[p]), "")
