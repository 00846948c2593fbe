#!/usr/bin/env bash
# Fleet doctor (p2pctl doctor): settings peers must agree on, coordinator and membership, reachability between
# nodes, ports, memlock and UCX_TLS. Works on a stopped fleet (pre-launch checks: env.sh agreement, ports free).
# Exit codes: 0 healthy, 1 findings, 2 bad input or could not check.
# --help is `p2pctl doctor --help` (argparse's), its usage naming this script.
set -euo pipefail
# shellcheck source=SCRIPTDIR/p2pctl.sh
source "$(dirname "$0")/p2pctl.sh"
p2p_exec doctor.sh doctor "$@"
