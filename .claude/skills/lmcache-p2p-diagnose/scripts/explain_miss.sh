#!/usr/bin/env bash
# Explain a miss (p2pctl explain): for one prompt, per node and per chunk, the chunk key under that node's own
# settings (LMCache's hasher run on the node), who holds it (the coordinator's key directory), and what a request
# would do there: a local hit, a pull from a named peer, or a recompute with its reason and evidence.
# Read-only: sends no request, prefetch or pull.
# Exit codes: 0 every full chunk served on every node explained, 1 some would be recomputed, 2 bad input.
# --help is `p2pctl explain --help` (argparse's), its usage naming this script.
set -euo pipefail
# shellcheck source=SCRIPTDIR/p2pctl.sh
source "$(dirname "$0")/p2pctl.sh"
p2p_exec explain_miss.sh explain "$@"
