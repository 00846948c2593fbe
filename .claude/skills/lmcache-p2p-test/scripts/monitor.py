#!/usr/bin/env python3
"""Live per-node view of the fleet: P2P loads/s, hit ratio, L1, queue, TTFT p50/p99 (p2pctl monitor; --once for one frame)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _p2pctl import exec_p2pctl  # noqa: E402

exec_p2pctl('monitor')
