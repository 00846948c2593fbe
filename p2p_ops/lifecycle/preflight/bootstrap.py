"""`p2pctl probe --bootstrap`: create the project's virtualenv on nodes whose `venv` does not exist yet (nothing
runs on a node whose venv answers): `python3 -m venv`, then every `$(PIP) install` line of the Makefile's setup
recipe in its order (`.[node]` becomes `<project>[node]`; the pip upgrade may fail on offline nodes).

The pip steps are read from this checkout's Makefile (`make setup` is the one source of truth for install
order and pins), so bootstrap and `make setup` cannot drift apart. Nodes that do not share the filesystem need
the checkout copied first (or `make setup` run there by hand).
"""

from __future__ import annotations

import shlex
from pathlib import Path

from p2p_ops.errors import BadInput
from p2p_ops.lifecycle.context import FleetContext
from p2p_ops.resources import CHECKOUT
from p2p_ops.spec.model import Node

PROJECT = CHECKOUT


def pip_steps(makefile_text: str) -> list[list[str]]:
    steps = []
    for line in makefile_text.splitlines():
        if line.strip().split()[:2] == ["$(PIP)", "install"]:
            steps.append(shlex.split(line)[2:])
    return steps


def bootstrap_script(venv: str, project: str, steps: list[list[str]]) -> str:
    if not steps:
        raise BadInput("no `$(PIP) install` steps found in the Makefile; cannot bootstrap")
    q = shlex.quote
    pip = f"{q(venv)}/bin/pip"
    unseen = (f"this node does not see {project}: copy the checkout there (same path) or create {venv} by hand "
              "with make setup")
    lines = [
        "set -euo pipefail",
        f"test -f {q(project)}/pyproject.toml || {{ echo {q(unseen)} >&2; exit 3; }}",
        "command -v python3 >/dev/null || { echo 'python3 not found: install python3 and python3-venv' >&2; "
        "exit 3; }",
        f"python3 -m venv {q(venv)}",
    ]
    for args in steps:
        args = [project + a[1:] if a == "." or a.startswith(".[") else a for a in args]
        cmd = f"{pip} install " + " ".join(q(a) for a in args)
        if "--upgrade" in args and "pip" in args:
            cmd += " || echo 'pip upgrade skipped (offline?)' >&2"
        lines.append(cmd)
    lines.append(f"{q(venv)}/bin/python -c 'import lmcache, p2p_ops' && echo bootstrapped {q(venv)}")
    return "\n".join(lines) + "\n"


def needs_bootstrap(probe) -> bool:
    return probe.error is None and probe.python is not None and not probe.python.present


def bootstrap_node(ctx: FleetContext, node: Node, project: str | Path = PROJECT, timeout: float = 3600) -> str:
    # A failure raises CommandFailed with the output tail.
    if not node.venv:
        raise BadInput(f"node {node.name} has no `venv` in fleet.yaml: set the path its virtualenv should have")
    steps = pip_steps((Path(project) / "Makefile").read_text())
    script = bootstrap_script(node.venv, str(project), steps)
    res = ctx.conn(node).run(script, timeout=timeout, check=True)
    return res.stdout.strip().splitlines()[-1] if res.stdout.strip() else "bootstrapped"
