#!/usr/bin/env python3
"""Summarise UCX/NIXL logs: per-endpoint transports and lanes, READ/WRITE protocols, grouped errors.

usage: parse_ucx_trace.py FILE [FILE ...] [--expect-rdma] [--json]      ('-' reads stdin)

Understands UCX log lines (any version's padding, the fatal form), endpoint-configuration lines
(`rma(rc_mlx5/mlx5_0:1)` = RDMA, `rma_am(tcp/eth0)` = emulated), UCX_PROTO_INFO tables in the 1.13,
1.15-1.19 and 1.23 layouts, `ucx_info -e` dumps and NIXL core/Python/vLLM lines. Capture logs with
UCX_LOG_LEVEL=info (and UCX_PROTO_INFO=y for the protocol tables).
Exit codes: 0 no errors, 1 errors (or, with --expect-rdma, inter-node payload not on RDMA), 2 nothing parsed.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _p2pctl import exec_p2pctl  # noqa: E402

if __name__ == "__main__":
    exec_p2pctl("ucx-trace")
