#!/usr/bin/env python3
"""Rebuild summary.md and the plots of a test run folder from its raw evidence (p2pctl report RUN_DIR)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _p2pctl import exec_p2pctl  # noqa: E402

exec_p2pctl('report')
