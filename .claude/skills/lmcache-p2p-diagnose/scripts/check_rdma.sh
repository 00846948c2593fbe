#!/usr/bin/env bash
# RDMA readiness of this host (p2pctl rdma): devices, ports, GIDs, uverbs, memlock, GPUDirect, GPU/NIC affinity.
# Without RDMA it says so and checks the TCP path instead.
# Exit codes: 0 healthy, 1 findings, 2 bad input or could not check.
# --help is `p2pctl rdma --help` (argparse's), its usage naming this script.
set -euo pipefail
# shellcheck source=SCRIPTDIR/p2pctl.sh
source "$(dirname "$0")/p2pctl.sh"
p2p_exec check_rdma.sh rdma "$@"
