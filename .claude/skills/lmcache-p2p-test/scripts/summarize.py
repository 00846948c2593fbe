#!/usr/bin/env python3
"""Rebuild summary.md and the plots of a test run folder from its raw evidence (p2pctl report RUN_DIR)."""
import os
import sys
from pathlib import Path

p2pctl = Path(__file__).resolve().parents[4] / "scripts" / "p2pctl"
os.execv(str(p2pctl), [str(p2pctl), "report", *sys.argv[1:]])
