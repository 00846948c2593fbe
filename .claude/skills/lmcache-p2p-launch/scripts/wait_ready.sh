#!/usr/bin/env bash
# Wait until every server is registered with N-1 peers and every engine is healthy (p2pctl wait).
# Exit codes: 0 success, 1 a check failed, 2 bad input or could not run.
# --help is `p2pctl wait --help` (argparse's), its usage naming this script.
set -euo pipefail
# shellcheck source=SCRIPTDIR/p2pctl.sh
source "$(dirname "$0")/p2pctl.sh"
p2p_exec wait_ready.sh wait "$@"
