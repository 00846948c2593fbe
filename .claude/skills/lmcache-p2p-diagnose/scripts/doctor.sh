#!/usr/bin/env bash
# Fleet doctor (p2pctl doctor): settings peers must agree on, coordinator and membership, reachability between
# nodes, ports, memlock and UCX_TLS. Works on a stopped fleet (pre-launch checks: env.sh agreement, ports free).
# Exit codes: 0 healthy, 1 findings, 2 bad input or could not check.
set -euo pipefail
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
  cat <<'USAGE'
usage: doctor.sh [-f fleet.yaml] [--run-dir DIR] [--no-reach] [--json [--facts]]

Reads every instance's env.sh and, for running servers, /status, /config, /lmc_version, the process
environment (/proc/<pid>/environ), /proc/<pid>/limits and the NONE_HASH line of server.log; the
coordinator's /healthz and /instances; package versions of each node's interpreter; and opens a TCP
connection from every node to every advertised P2P URL, mq port and the coordinator.

Checks: PYTHONHASHSEED, chunk size, hash algorithm, L1 alignment, model, world size, LMCache and NIXL
versions, transfer engine and NONE_HASH agree across peers; every server is registered and points at the
fleet's coordinator; ports are free before launch and listening after; memlock; UCX_TLS sane for a
host-DRAM L1. Each finding names the instances, the values and the fix.

  --no-reach   skip the TCP connects between nodes
  --json       machine-readable report (--facts adds everything gathered)

Healthy output ends with "result: healthy".
USAGE
  exit 0
fi
# shellcheck source=SCRIPTDIR/p2pctl.sh
source "$(dirname "$0")/p2pctl.sh"
p2p_exec doctor.sh doctor "$@"
