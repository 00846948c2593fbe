#!/usr/bin/env bash
# Start the fleet's Prometheus (p2pctl prometheus up): config rendered from fleet.yaml, tsdb in the run folder.
# Exit codes: 0 ready, 2 could not start (e.g. the prometheus binary is missing).
# Stop it with `p2pctl prometheus down`; `p2pctl grafana -o dashboard.json` writes a dashboard for it.
# --help is `p2pctl prometheus up --help` (argparse's), its usage naming this script.
set -euo pipefail
# shellcheck source=SCRIPTDIR/p2pctl.sh
source "$(dirname "$0")/p2pctl.sh"
p2p_exec start_prometheus.sh prometheus up "$@"
