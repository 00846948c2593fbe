#!/usr/bin/env bash
# Render env.sh and the start wrappers of every instance (p2pctl render).
# Exit codes: 0 success, 1 a check failed, 2 bad input or could not run.
set -euo pipefail
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
  cat <<'USAGE'
usage: gen_env.sh [-f fleet.yaml] [--run-dir DIR] [--json]

Writes <run-dir>/<instance>/env.sh, start_server.sh, start_engine.sh and <run-dir>/coordinator/*.
Prints the paths written. Source an env.sh to get that instance's settings in your shell.
USAGE
  exit 0
fi
# shellcheck source=SCRIPTDIR/p2pctl.sh
source "$(dirname "$0")/p2pctl.sh"
p2p_exec gen_env.sh render "$@"
