#!/usr/bin/env bash
# Start the fleet's Prometheus (p2pctl prometheus up): config rendered from fleet.yaml, tsdb in the run folder.
# Exit codes: 0 ready, 2 could not start (e.g. the prometheus binary is missing).
set -euo pipefail
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
  cat <<'USAGE'
usage: start_prometheus.sh [-f fleet.yaml] [--run-dir DIR]

Renders p2p-run/<fleet>/prometheus/prometheus.yml (every server's /metrics on its HTTP port, every
engine's /metrics, the coordinator's), starts the Debian `prometheus` binary on 127.0.0.1:<prometheus.port>
(9390 by default) and waits for /-/ready. Stop it with: p2pctl prometheus down
USAGE
  exit 0
fi
exec "$(dirname "$0")/../../../../scripts/p2pctl" prometheus up "$@"
