"""What `up` checks on every node before anything starts: the node answers, and a vLLM node holds vLLM's
interpreter and (for a local model folder) the model. A failure names every node while nothing runs anywhere."""

from __future__ import annotations

from typing import Optional

from p2p_ops.errors import CouldNotRun
from p2p_ops.facts.paths import NODE_ANSWERS, paths_fact
from p2p_ops.facts.python_env import python_env_fact
from p2p_ops.facts.sections import read_fact
from p2p_ops.lifecycle.context import FleetContext
from p2p_ops.lifecycle.preflight.verdict import MOONCAKE_FIX, mooncake_problem
from p2p_ops.lifecycle.render import bin_dir_for, vllm_python
from p2p_ops.spec.model import Node


def preflight(ctx: FleetContext, only: Optional[str] = None) -> None:
    """An unreachable host, a refused key or a bad host key fails the launch with one line per host."""
    results = ctx.for_each_node(lambda n: read_fact(ctx.conn(n), NODE_ANSWERS, timeout=30, check=True), only)
    errors = [f"- {name}: {res}" for name, res in results.items() if isinstance(res, Exception)]
    if errors:
        raise CouldNotRun("cannot reach every node, so nothing was started:\n" + "\n".join(errors))
    for what, missing_on in (("vLLM", vllm_missing if ctx.fleet.runtime == "vllm" else None),
                             ("Mooncake", mooncake_missing if ctx.fleet.settings.transfer_engine == "mooncake_te"
                              else None)):
        missing = {name: res for name, res in ctx.for_each_node(lambda n: missing_on(ctx, n), only).items()
                   if res} if missing_on else {}
        if missing:
            raise CouldNotRun(f"{what} cannot start on every node, so nothing was started:\n"
                              + "\n".join(f"- {name}: {res}" for name, res in missing.items()))


def mooncake_missing(ctx: FleetContext, node: Node) -> str:
    py = read_fact(ctx.conn(node), python_env_fact(f"{bin_dir_for(node)}/python"), timeout=60)
    problem = mooncake_problem(ctx.fleet.settings.transfer_engine, py)
    return f"{problem}; {MOONCAKE_FIX}" if problem else ""


def vllm_missing(ctx: FleetContext, node: Node) -> str:
    """With the fix; empty when nothing is missing."""
    py = vllm_python(ctx.fleet, node)
    model = ctx.fleet.vllm.model_path
    wanted = {py: "executable"}
    problems = {py: f"no vLLM interpreter at {py}; run `make setup-vllm` there or set vllm.venv / nodes[].vllm_venv"}
    if model.startswith("/"):
        config = model + "/config.json"
        wanted[config] = "file"
        problems[config] = (f"no model at {model} (no config.json); make one with `p2pctl make-model {model}` or "
                            "fix vllm.model_path")
    found = read_fact(ctx.conn(node), paths_fact(wanted), timeout=30)
    return next((problems[p] for p in wanted if not found[p]), "")
