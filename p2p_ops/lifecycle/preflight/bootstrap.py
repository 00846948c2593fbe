"""`p2pctl probe --bootstrap`: create the project's virtualenv on nodes whose `venv` does not exist yet (nothing
runs on a node whose venv answers): `python3 -m venv`, then every `$(PIP) install` line of the Makefile's setup
recipe in its order (`.[node]` becomes `<project>[node]`; the pip upgrade may fail on offline nodes).

The pip steps are read from this checkout's Makefile (`make setup` is the one source of truth for install
order and pins), so bootstrap and `make setup` cannot drift apart. Nodes that do not share the filesystem need
the checkout copied first (or `make setup` run there by hand).

A fleet on transfer_engine mooncake_te also gets the Mooncake wheel matching the node (`mooncake_script`, the
same script `make setup-mooncake` runs here), on a new venv and on one whose Mooncake does not import.
"""

from __future__ import annotations

import shlex

from p2p_ops.errors import BadInput
from p2p_ops.facts.python_env import FAMILIES, MOONCAKE_IMPORT, MOONCAKE_PIN, MOONCAKE_WHEELS
from p2p_ops.lifecycle.context import FleetContext
from p2p_ops.resources import CHECKOUT
from p2p_ops.spec.model import Node


def pip_steps(makefile_text: str) -> list[list[str]]:
    return [shlex.split(line)[2:] for line in makefile_text.splitlines()
            if line.strip().split()[:2] == ["$(PIP)", "install"]]


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


def mooncake_wheel(gpus, torch_version: str | None) -> str:
    """The build for a node: non-CUDA without GPUs; else the CUDA major of the venv's torch (`+cu128`), else of
    the driver (580 and later ship CUDA 13)."""
    if not gpus:
        return MOONCAKE_WHEELS["cpu"]
    tag = (torch_version or "").partition("+")[2]
    major = tag[2:4] if tag.startswith("cu") else "13" if int("0" + gpus[0].driver.split(".")[0]) >= 580 else "12"
    return MOONCAKE_WHEELS.get(f"cuda{major}", MOONCAKE_WHEELS["cuda12"])


def mooncake_script(venv: str, wheel: str) -> str:
    """Install `wheel` (other builds out first: they share the `mooncake` package), check that it imports and
    that `lmcache server` still starts, else uninstall it again: a Mooncake that does not import stops every
    lmcache server of that venv, nixl ones too (LMCache catches only ModuleNotFoundError)."""
    v = shlex.quote(venv)
    why = (f"{wheel} does not import: $(tail -n 1 <<<\"$err\") (Debian libibverbs1 libnuma1 libcurl4 missing? "
           "scripts/test_deps.sh installs them; a CUDA build on a node without that CUDA?)")
    return "\n".join([
        "set -uo pipefail",
        f"undo() {{ echo \"$1; uninstalled {wheel} again\" >&2; {v}/bin/pip uninstall -y -q {wheel}; exit 3; }}",
        "force=",
        *(f"if {v}/bin/pip show -q {o} 2>/dev/null; then {v}/bin/pip uninstall -y -q {o}; "
          "force=--force-reinstall; fi" for o in FAMILIES["mooncake"] if o != wheel),
        f"{v}/bin/pip install -q $force {wheel}=={MOONCAKE_PIN} || exit 3",
        f"err=$({v}/bin/python -c {shlex.quote(MOONCAKE_IMPORT)} 2>&1) || undo \"{why}\"",
        f"{v}/bin/lmcache server --help >/dev/null 2>&1 || undo 'lmcache server --help fails with {wheel}'",
        f"echo {wheel} {MOONCAKE_PIN} imports in {v}"]) + "\n"


def needs_bootstrap(probe) -> bool:
    return probe.error is None and probe.python is not None and not probe.python.present


def needs_mooncake(fleet, probe) -> bool:
    py = probe.python
    return fleet.settings.transfer_engine == "mooncake_te" and probe.error is None and (
        py is None or not py.present or py.mooncake != "ok")


def bootstrap_node(ctx: FleetContext, node: Node, probe) -> str:
    # A failure raises CommandFailed with the output tail.
    if not node.venv:
        raise BadInput(f"node {node.name} has no `venv` in fleet.yaml: set the path its virtualenv should have")
    steps = pip_steps((CHECKOUT / "Makefile").read_text())
    script = bootstrap_script(node.venv, str(CHECKOUT), steps) if needs_bootstrap(probe) else ""
    if needs_mooncake(ctx.fleet, probe):
        script += mooncake_script(node.venv, mooncake_wheel(probe.gpus, probe.python and probe.python.packages.get(
            "torch")))
    res = ctx.conn(node).run(script, timeout=3600, check=True)
    return res.stdout.strip().splitlines()[-1] if res.stdout.strip() else "bootstrapped"


if __name__ == "__main__":  # `make setup-mooncake`: the script for the venv argv[1] on this host
    import sys
    from importlib.metadata import version

    from p2p_ops.connectors.local import LocalConnector
    from p2p_ops.facts.gpus import GPUS
    from p2p_ops.facts.sections import read_fact

    print(mooncake_script(sys.argv[1], mooncake_wheel(read_fact(LocalConnector(), GPUS, timeout=60),
                                                      version("torch"))))
