#!/usr/bin/env bash
# Start the fleet's processes detached (p2pctl up): coordinator, lmcache servers, engines.
# Exit codes: 0 success, 1 a check failed, 2 bad input or could not run.
# Follow with wait_ready.sh.
# --help is `p2pctl up --help` (argparse's), its usage naming this script.
set -euo pipefail
# shellcheck source=SCRIPTDIR/p2pctl.sh
source "$(dirname "$0")/p2pctl.sh"
p2p_exec start_node.sh up "$@"
