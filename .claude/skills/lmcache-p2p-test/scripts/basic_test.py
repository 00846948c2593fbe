#!/usr/bin/env python3
"""Cross-node proof: cold on A, served from A's cache on B, identical outputs (p2pctl test basic). Exit 0 PASS, 1 FAIL, 2 could not run."""
import os
import sys
from pathlib import Path

p2pctl = Path(__file__).resolve().parents[4] / "scripts" / "p2pctl"
os.execv(str(p2pctl), [str(p2pctl), "test", "basic", *sys.argv[1:]])
