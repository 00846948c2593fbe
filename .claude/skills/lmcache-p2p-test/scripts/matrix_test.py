#!/usr/bin/env python3
"""Every pair proven: each node computes a fresh prefix, every other node pulls it (p2pctl test matrix). Exit 0 PASS, 1 FAIL, 2 could not run."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _p2pctl import exec_p2pctl  # noqa: E402

exec_p2pctl('test', 'matrix')
