#!/usr/bin/env bash
# Start the fleet's Prometheus (p2pctl prometheus up): config rendered from fleet.yaml, tsdb in the run folder.
# Exit codes: 0 ready, 2 could not start (e.g. the prometheus binary is missing).
set -euo pipefail
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
  cat <<'USAGE'
usage: start_prometheus.sh [-f fleet.yaml] [--run-dir DIR] [--json]

Renders p2p-run/<fleet>/prometheus/prometheus.yml (every server's /metrics on its HTTP port, every
engine's /metrics, the coordinator's), starts the Debian `prometheus` binary on 127.0.0.1:<prometheus.port>
(9390 by default) with alert and recording rules rendered from the fleet (rules.yml next to it: peers
below N-1, P2P load failures, lookup timeouts, L1 out of memory, engine/server down) and waits for
/-/ready. Stop it with: p2pctl prometheus down. A dashboard for it: p2pctl grafana -o dashboard.json
USAGE
  exit 0
fi
# shellcheck source=SCRIPTDIR/p2pctl.sh
source "$(dirname "$0")/p2pctl.sh"
p2p_exec start_prometheus.sh prometheus up "$@"
