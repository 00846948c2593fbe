#!/usr/bin/env bash
# Start the fleet's processes detached (p2pctl up): coordinator, lmcache servers, engines.
# Exit codes: 0 success, 1 a check failed, 2 bad input or could not run.
set -euo pipefail
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
  cat <<'USAGE'
usage: start_node.sh [-f fleet.yaml] [--run-dir DIR] [--node NAME] [--role server|engine|coordinator ...]
                     [--no-render] [--dry-run] [--timeout S] [--json]

Without --node: the whole fleet. With --node: that node's servers and engines (and the coordinator
if it runs there). Returns once every process answers HTTP; a process that dies at start is
reported with the error lines and tail of its log. Follow with wait_ready.sh.
A process that already runs is kept (reported as "kept ..."), never restarted.

  --role ROLE   only these processes (repeatable), e.g. --node node-b --role server restarts one
                lmcache server after stop_node.sh --node node-b --role server
  --no-render   start from the env.sh / start_*.sh files as they are on disk (keeps a hand edit);
                without it they are re-rendered from fleet.yaml first
  --dry-run     print every command per host and start nothing (honours --node, --role, --no-render)
  --json        one JSON document on stdout
USAGE
  exit 0
fi
# shellcheck source=SCRIPTDIR/p2pctl.sh
source "$(dirname "$0")/p2pctl.sh"
p2p_exec start_node.sh up "$@"
