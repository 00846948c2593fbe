#!/usr/bin/env bash
# Wait until every server is registered with N-1 peers and every engine is healthy (p2pctl wait).
# Exit codes: 0 success, 1 a check failed, 2 bad input or could not run.
set -euo pipefail
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
  cat <<'USAGE'
usage: wait_ready.sh [-f fleet.yaml] [--run-dir DIR] [--timeout S] [--json]

Exit 0 and a status table when ready; exit 1 naming each instance that is not, its state and
the tail of its log.
USAGE
  exit 0
fi
# shellcheck source=SCRIPTDIR/p2pctl.sh
source "$(dirname "$0")/p2pctl.sh"
p2p_exec wait_ready.sh wait "$@"
