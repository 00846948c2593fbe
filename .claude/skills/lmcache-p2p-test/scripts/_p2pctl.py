"""Run p2pctl for this skill's Python scripts, found the way p2pctl.sh finds it (same order, same messages):
$P2PCTL, $P2P_KV_OPS_HOME/.venv/bin/p2pctl, the checkout this folder sits in, `p2pctl` on PATH.
Self-contained so the skill folder works when copied elsewhere. Identical in every lmcache-p2p-* skill."""

import os
import shutil
import sys
from pathlib import Path


def find_p2pctl() -> str:
    if os.environ.get("P2PCTL"):
        if not os.access(os.environ["P2PCTL"], os.X_OK):
            sys.exit(f"P2PCTL={os.environ['P2PCTL']} is not an executable p2pctl; fix or unset it")
        return os.environ["P2PCTL"]
    if os.environ.get("P2P_KV_OPS_HOME"):
        exe = Path(os.environ["P2P_KV_OPS_HOME"]) / ".venv" / "bin" / "p2pctl"
        if not os.access(exe, os.X_OK):
            sys.exit(f"P2P_KV_OPS_HOME={os.environ['P2P_KV_OPS_HOME']} has no .venv/bin/p2pctl; "
                     "run 'make setup' there")
        return str(exe)
    for d in Path(__file__).resolve().parents:
        exe = d / ".venv" / "bin" / "p2pctl"
        proj = d / "pyproject.toml"
        if os.access(exe, os.X_OK) and proj.is_file() and 'name = "p2p-kv-ops"' in proj.read_text():
            return str(exe)
    found = shutil.which("p2pctl")
    if found:
        return found
    print("p2pctl not found: install it (pip install p2p-kv-ops, or 'make setup' in a checkout and put "
          ".venv/bin on PATH), or set P2PCTL=/path/to/p2pctl or P2P_KV_OPS_HOME=/path/to/checkout",
          file=sys.stderr)
    sys.exit(2)


def exec_p2pctl(*args: str) -> None:
    """Replace this process with `p2pctl ARGS... <this script's arguments>`; usage lines name this script."""
    exe = find_p2pctl()
    os.environ["P2PCTL_PROG"] = Path(sys.argv[0]).name
    os.execv(exe, [exe, *args, *sys.argv[1:]])
