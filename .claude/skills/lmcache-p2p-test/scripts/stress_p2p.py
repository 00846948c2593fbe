#!/usr/bin/env python3
"""Stress a running fleet: ladder, long documents, sustained mix; writes requests.csv, plots, summary.md (p2pctl test stress)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _p2pctl import exec_p2pctl  # noqa: E402

exec_p2pctl('test', 'stress')
