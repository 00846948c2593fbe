#!/usr/bin/env bash
# Rail check (p2pctl rails): per-NIC byte counters before and after a transfer or a wait; flags idle,
# unexpected or imbalanced rails.
# Exit codes: 0 healthy, 1 findings, 2 bad input or could not check.
set -euo pipefail
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
  cat <<'USAGE'
usage: rail_check.sh [--expect IF[,IF...]] [--wait S] [--sysfs-root DIR] [--json] [-- COMMAND ...]
       rail_check.sh --save-snapshot FILE
       rail_check.sh --before FILE [--after FILE] [--expect ...]

Counts bytes per NIC: RDMA ports from counters/port_{xmit,rcv}_data (x4: they count 4-byte words),
TCP interfaces from /sys/class/net/<if>/statistics. Runs COMMAND between two snapshots (or waits
--wait seconds, default 5) and prints which rails carried how many bytes.

  --expect IFS       expected rails, e.g. mlx5_0,mlx5_1 or mlx5_0:1 or eth2 (others carrying traffic
                     are flagged; with no list, all RDMA ports are compared for balance)
  --min-bytes N      ignore rails below N bytes (default 1 MiB)
  --imbalance R      flag a rail that carried less than busiest/R (default 2)
  --save-snapshot F  write a snapshot JSON and exit (take one on each node, compare later)
  --before F --after F  compare two saved snapshots
  --json             machine-readable report

Example: rail_check.sh --expect mlx5_0,mlx5_1 -- python stress_p2p.py --requests 50
USAGE
  exit 0
fi
# shellcheck source=SCRIPTDIR/p2pctl.sh
source "$(dirname "$0")/p2pctl.sh"
p2p_exec rail_check.sh rails "$@"
