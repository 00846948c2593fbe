#!/usr/bin/env bash
# Stop the fleet's processes by pidfile (p2pctl down): SIGINT, then TERM, then KILL; idempotent.
# Exit codes: 0 success, 1 a check failed, 2 bad input or could not run.
# Start a stopped role again with start_node.sh --node NAME --role ROLE.
# --help is `p2pctl down --help` (argparse's), its usage naming this script.
set -euo pipefail
# shellcheck source=SCRIPTDIR/p2pctl.sh
source "$(dirname "$0")/p2pctl.sh"
p2p_exec stop_node.sh down "$@"
