#!/usr/bin/env python3
"""Multi-peer behaviour: which peer serves a prefix held by one, two or no peers, and lookup ms against N (p2pctl bench peers). Exit 0 PASS, 1 FAIL, 2 could not run."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _p2pctl import exec_p2pctl  # noqa: E402

exec_p2pctl('bench', 'peers')
