#!/usr/bin/env python3
"""Real NIXL READ between two agents on this host under a candidate UCX environment (p2pctl probe-nixl).

usage: probe_nixl.py [--tls LIST] [--net-devices LIST] [--env NAME=VALUE ...] [--size 16M] [--iterations 3]
                     [--timeout 60] [--keep-logs DIR] [--json]

Reports: success, bytes verified, median throughput, the transports and READ path UCX chose (from its
UCX_LOG_LEVEL=info / UCX_PROTO_INFO log), and on failure the exception with its likely cause and fix.
Metadata goes through files, not the NIXL listener. Exit codes: 0 the READ worked, 1 it failed, 2 could not run.

Example: probe_nixl.py --tls tcp --net-devices lo     (the TCP path, on loopback)
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _p2pctl import exec_p2pctl  # noqa: E402

if __name__ == "__main__":
    exec_p2pctl("probe-nixl")
