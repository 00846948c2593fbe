#!/usr/bin/env python3
"""Live per-node view of the fleet: P2P loads/s, hit ratio, L1, queue, TTFT p50/p99 (p2pctl monitor; --once for one frame)."""
import os
import sys
from pathlib import Path

p2pctl = Path(__file__).resolve().parents[4] / "scripts" / "p2pctl"
os.execv(str(p2pctl), [str(p2pctl), "monitor", *sys.argv[1:]])
