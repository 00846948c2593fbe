#!/usr/bin/env python3
"""Stress a running fleet: ladder, long documents, sustained mix; writes requests.csv, plots, summary.md (p2pctl test stress)."""
import os
import sys
from pathlib import Path

p2pctl = Path(__file__).resolve().parents[4] / "scripts" / "p2pctl"
os.execv(str(p2pctl), [str(p2pctl), "test", "stress", *sys.argv[1:]])
