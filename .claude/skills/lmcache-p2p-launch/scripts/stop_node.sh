#!/usr/bin/env bash
# Stop the fleet's processes by pidfile (p2pctl down): SIGINT, then TERM, then KILL; idempotent.
# Exit codes: 0 success, 1 a check failed, 2 bad input or could not run.
set -euo pipefail
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
  cat <<'USAGE'
usage: stop_node.sh [-f fleet.yaml] [--run-dir DIR] [--node NAME]

Stops engines, then servers, then the coordinator. Safe to run twice; never signals a pid whose
command line is not the one it started.
USAGE
  exit 0
fi
# shellcheck source=/dev/null
source "$(dirname "$0")/../../../../scripts/p2pctl-locate.sh"
exec "$P2PCTL" down "$@"
