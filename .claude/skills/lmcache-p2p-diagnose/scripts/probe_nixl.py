#!/usr/bin/env python3
"""Real NIXL READ between two agents on this host under a candidate UCX environment (p2pctl probe-nixl).

usage: probe_nixl.py [--tls LIST] [--net-devices LIST] [--env NAME=VALUE ...] [--size 16M] [--iterations 3]
                     [--timeout 60] [--keep-logs DIR] [--json]

Reports: success, bytes verified, median throughput, the transports and READ path UCX chose (from its
UCX_LOG_LEVEL=info / UCX_PROTO_INFO log), and on failure the exception with its likely cause and fix.
Metadata goes through files, not the NIXL listener. Exit codes: 0 the READ worked, 1 it failed, 2 could not run.

Example: probe_nixl.py --tls tcp --net-devices lo     (the TCP path, on loopback)
"""

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[4]
VENV = REPO / ".venv"
# Run from a checkout without activating its venv: prefer the checkout's venv (it has nixl), and make the
# repo importable either way.
if (VENV / "bin" / "python").exists() and Path(sys.prefix).resolve() != VENV.resolve():
    os.execv(str(VENV / "bin" / "python"), [str(VENV / "bin" / "python"), __file__, *sys.argv[1:]])
sys.path.insert(0, str(REPO))

from p2p_ops.cli.diag_cmds import run_standalone  # noqa: E402

if __name__ == "__main__":
    sys.exit(run_standalone(["probe-nixl", *sys.argv[1:]], prog="probe_nixl.py"))
