#!/usr/bin/env bash
# Stop the fleet's processes by pidfile (p2pctl down): SIGINT, then TERM, then KILL; idempotent.
# Exit codes: 0 success, 1 a check failed, 2 bad input or could not run.
set -euo pipefail
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
  cat <<'USAGE'
usage: stop_node.sh [-f fleet.yaml] [--run-dir DIR] [--node NAME] [--role server|engine|coordinator ...]
                    [--json]

Stops engines, then servers, then the coordinator. Safe to run twice; never signals a pid whose
command line is not the one it started.

  --role ROLE   only these processes (repeatable), e.g. --node node-b --role server stops one
                lmcache server and leaves its engine running (start it again with start_node.sh)
  --json        one JSON document on stdout
USAGE
  exit 0
fi
# shellcheck source=SCRIPTDIR/p2pctl.sh
source "$(dirname "$0")/p2pctl.sh"
p2p_exec stop_node.sh down "$@"
