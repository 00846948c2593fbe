#!/usr/bin/env python3
"""Cross-node proof: cold on A, served from A's cache on B, identical outputs (p2pctl test basic). Exit 0 PASS, 1 FAIL, 2 could not run."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _p2pctl import exec_p2pctl  # noqa: E402

exec_p2pctl('test', 'basic')
