#!/usr/bin/env python3
"""Real NIXL READ between two agents on this host under a candidate UCX environment (p2pctl probe-nixl; --help
is its argparse help, naming this script)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _p2pctl import exec_p2pctl  # noqa: E402

if __name__ == "__main__":
    exec_p2pctl("probe-nixl")
