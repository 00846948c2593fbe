#!/usr/bin/env bash
# Rail check (p2pctl rails): per-NIC byte counters before and after a transfer or a wait; flags idle,
# unexpected or imbalanced rails.
# Exit codes: 0 healthy, 1 findings, 2 bad input or could not check.
# --help is `p2pctl rails --help` (argparse's), its usage naming this script.
set -euo pipefail
# shellcheck source=SCRIPTDIR/p2pctl.sh
source "$(dirname "$0")/p2pctl.sh"
p2p_exec rail_check.sh rails "$@"
