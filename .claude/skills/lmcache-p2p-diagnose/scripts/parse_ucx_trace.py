#!/usr/bin/env python3
"""Summarise UCX/NIXL logs: per-endpoint transports and lanes, grouped errors (p2pctl ucx-trace; --help is its
argparse help, naming this script)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _p2pctl import exec_p2pctl  # noqa: E402

if __name__ == "__main__":
    exec_p2pctl("ucx-trace")
