#!/usr/bin/env bash
# Start the fleet's processes detached (p2pctl up): coordinator, lmcache servers, engines.
# Exit codes: 0 success, 1 a check failed, 2 bad input or could not run.
set -euo pipefail
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
  cat <<'USAGE'
usage: start_node.sh [-f fleet.yaml] [--run-dir DIR] [--node NAME] [--timeout S]

Without --node: the whole fleet. With --node: that node's servers and engines (and the coordinator
if it runs there). Returns once every process answers HTTP; a process that dies at start is
reported with the error lines and tail of its log. Follow with wait_ready.sh.
USAGE
  exit 0
fi
# shellcheck source=/dev/null
source "$(dirname "$0")/../../../../scripts/p2pctl-locate.sh"
exec "$P2PCTL" up "$@"
